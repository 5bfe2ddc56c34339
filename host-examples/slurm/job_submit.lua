-- job_submit.lua for gangway-slurm's native mode (host-examples/slurm/README.md,
-- "Native mode"): users keep sbatch, Gangway places.
--
-- Every job submitted to GANGWAY_PARTITION is held at submission (priority 0)
-- with its GPU request recorded in its admin comment and cleared, so that the
-- daemon can pin it to exact GPU indices (Slurm refuses to turn an untyped
-- GPU request into a typed one). A typed request (--gres=gpu:a100:4,
-- --gpus=a100:8) is recorded as it is: the daemon places it on nodes of that
-- GPU type (the node feature its [gpu_types] names). --constraint stays on
-- the job and is recorded too (--constraint=a100|h100 names GPU types). Only root and the daemon's user may change or
-- release a job there: a user cannot release their own job past Gangway.
-- scancel works as always.
--
-- Install: copy beside slurm.conf as job_submit.lua, set GANGWAY_PARTITION and
-- GANGWAY_ADMINS below, add `JobSubmitPlugins=lua` to slurm.conf, then
-- `scontrol reconfigure`. Debian ships the plugin in slurm-wlm-basic-plugins
-- (job_submit_lua.so, linked to liblua5.1).

-- The partition gangway-slurm manages (its slurm.partition).
local GANGWAY_PARTITION = "gw"
-- Users who may change and release jobs there: root and the uid the daemon
-- runs as (root, or SlurmUser).
local GANGWAY_ADMINS = { [0] = true }
-- The daemon's lock on the partition (a held job that never runs).
local LOCK_NAME = "gangway-lock"

local function names_partition(partitions)
   if partitions == nil then
      return false
   end
   for p in string.gmatch(partitions, "[^,]+") do
      if p == GANGWAY_PARTITION then
         return true
      end
   end
   return false
end

local function asks_gpus(spec)
   return spec ~= nil and string.find(spec, "gpu") ~= nil
end

-- Text recorded in the admin comment has no whitespace: the daemon reads the
-- recorded request as space-separated fields.
local function has_space(text)
   return text ~= nil and string.find(text, "%s") ~= nil
end

function slurm_job_submit(job_desc, part_list, submit_uid)
   if not names_partition(job_desc.partition) then
      return slurm.SUCCESS
   end
   if GANGWAY_ADMINS[submit_uid] and job_desc.name == LOCK_NAME then
      return slurm.SUCCESS
   end
   if job_desc.partition ~= GANGWAY_PARTITION then
      slurm.log_user("partition %s is placed by Gangway: submit to it alone (-p %s)",
                     GANGWAY_PARTITION, GANGWAY_PARTITION)
      return slurm.ERROR
   end
   local per_node = job_desc.tres_per_node or ""
   local per_job = job_desc.tres_per_job or ""
   if asks_gpus(job_desc.tres_per_task) or asks_gpus(job_desc.tres_per_socket) then
      slurm.log_user("partition %s: ask for GPUs per job (--gpus=N) or per node (--gres=gpu:N)",
                     GANGWAY_PARTITION)
      return slurm.ERROR
   end
   if not asks_gpus(per_node) and not asks_gpus(per_job) then
      slurm.log_user("partition %s is for GPU jobs: ask with --gpus=N or --gres=gpu:N",
                     GANGWAY_PARTITION)
      return slurm.ERROR
   end
   local features = job_desc.features or ""
   if has_space(per_node) or has_space(per_job) or has_space(features) then
      slurm.log_user("partition %s: a GPU request or --constraint with spaces cannot be placed",
                     GANGWAY_PARTITION)
      return slurm.ERROR
   end
   local nodes = job_desc.min_nodes
   if nodes == nil or nodes >= 4294967294 then
      nodes = ""
   end
   job_desc.admin_comment = string.format(
      "gangway: held until Gangway places it [request tres_per_node=%s tres_per_job=%s nodes=%s features=%s]",
      per_node, per_job, tostring(nodes), features)
   job_desc.tres_per_node = ""
   job_desc.tres_per_job = ""
   job_desc.priority = 0
   return slurm.SUCCESS
end

function slurm_job_modify(job_desc, job_rec, part_list, modify_uid)
   if GANGWAY_ADMINS[modify_uid] then
      return slurm.SUCCESS
   end
   if job_rec.partition == GANGWAY_PARTITION or names_partition(job_desc.partition) then
      -- Releasing, re-pinning or moving a job there is Gangway's.
      return slurm.ESLURM_ACCESS_DENIED
   end
   return slurm.SUCCESS
end

slurm.log_info("job_submit.lua: jobs of partition %s are held for gangway-slurm", GANGWAY_PARTITION)
return slurm.SUCCESS
