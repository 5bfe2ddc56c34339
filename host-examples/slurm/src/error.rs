//! The one error type of `gangway-slurm`: every variant names what failed
//! and where (file, command, node, job).

/// What went wrong in the daemon or a client command.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum SlurmError {
    /// The configuration file is missing, malformed or inconsistent.
    #[error("{file}: {message}")]
    Config {
        /// The file.
        file: String,
        /// What is wrong.
        message: String,
    },
    /// A Slurm command could not be run at all (not installed, not on PATH).
    #[error("cannot run `{command}` (is Slurm's client installed and on PATH?): {source}")]
    CommandMissing {
        /// The command.
        command: String,
        /// Why it could not start.
        source: std::io::Error,
    },
    /// A Slurm command ran and failed.
    #[error("`{command}` failed ({status}): {stderr}")]
    CommandFailed {
        /// The command line.
        command: String,
        /// Its exit status.
        status: String,
        /// What it printed on stderr (trimmed).
        stderr: String,
    },
    /// Slurm did not answer: a command timed out, could not reach the
    /// controller, or answered with an error list instead of its data
    /// (`squeue --json` exits 0 with `errors` while the controller is down).
    /// The daemon holds every decision that depends on Slurm until it
    /// answers again.
    #[error("Slurm is unreachable: `{command}`: {message}")]
    Unreachable {
        /// The command line.
        command: String,
        /// What it said, or that it did not answer in time.
        message: String,
    },
    /// Slurm refused a command for a reason of its own configuration (an
    /// unknown partition, an invalid account or QOS): no job's fault, so the
    /// daemon holds the queue and reports it instead of failing jobs.
    #[error("Slurm refuses `{command}` for a reason of its configuration: {message}")]
    Misconfigured {
        /// The command line.
        command: String,
        /// Slurm's message.
        message: String,
    },
    /// A Slurm command printed something this daemon cannot read.
    #[error("`{command}` printed output that cannot be read: {message}")]
    Output {
        /// The command.
        command: String,
        /// What is wrong.
        message: String,
    },
    /// The cluster cannot be turned into a Gangway topology.
    #[error("topology: {0}")]
    Topology(String),
    /// A node's feature names one GPU type of `[gpu_types]` and the GRES
    /// type of its GPUs (gres.conf `Type=`) another.
    #[error(
        "topology: node {node}: its feature names GPU type {feature} but its GPUs' GRES type \
         (gres.conf Type=) is {gres}; a node's GPUs are of one type: make them agree, or drop \
         the feature"
    )]
    GpuTypeDisagrees {
        /// The Slurm node.
        node: String,
        /// The type its feature names.
        feature: String,
        /// The type its GRES names.
        gres: String,
    },
    /// A file or socket operation failed.
    #[error("{what}: {source}")]
    Io {
        /// What was being done, with the path.
        what: String,
        /// The I/O error.
        source: std::io::Error,
    },
    /// The saved state cannot be read or does not fit this cluster.
    #[error("state {file}: {message}")]
    State {
        /// The state file.
        file: String,
        /// What is wrong.
        message: String,
    },
    /// A policy or Wasm module could not be built, loaded or swapped in.
    #[error("policy: {0}")]
    Policy(String),
    /// A client and the daemon did not understand each other.
    #[error("protocol: {0}")]
    Protocol(String),
    /// The daemon did not answer a client in time.
    #[error(
        "the daemon at {socket} did not answer within {seconds} s (is it stopped or stuck? \
         see its log; --timeout SECONDS waits longer)"
    )]
    Timeout {
        /// The socket.
        socket: String,
        /// How long the client waited.
        seconds: f64,
    },
    /// A file or folder has permissions its trust does not allow.
    #[error("{path}: {message}")]
    Permissions {
        /// The file or folder.
        path: String,
        /// What is wrong and how to fix it.
        message: String,
    },
    /// The daemon refused a request (unknown VC, too many GPUs, ...).
    #[error("{0}")]
    Refused(String),
}

impl SlurmError {
    /// An I/O error while doing `what`.
    pub fn io(what: impl Into<String>, source: std::io::Error) -> SlurmError {
        SlurmError::Io {
            what: what.into(),
            source,
        }
    }
}
