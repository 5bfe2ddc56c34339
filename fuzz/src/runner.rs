//! A fuzzing loop for stable Rust: every corpus input once, then seeded
//! random mutations of the corpus (byte flips, interesting values, inserted
//! dictionary tokens, deleted, duplicated and spliced ranges) until the
//! budget is spent. Without coverage feedback it finds less than libFuzzer
//! per execution, but it needs no nightly toolchain and is deterministic:
//! the same seed replays the same inputs.

use std::panic::{AssertUnwindSafe, catch_unwind};
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use rand::{Rng, SeedableRng};
use rand_chacha::ChaCha8Rng;

use crate::targets::Target;

/// How long to fuzz one target.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Budget {
    /// Stop after this long (checked between executions).
    pub time: Option<Duration>,
    /// Stop after this many mutated inputs.
    pub iterations: Option<u64>,
    /// The mutation sequence's seed.
    pub seed: u64,
}

impl Budget {
    /// `n` mutated inputs after the corpus.
    pub fn iterations(n: u64, seed: u64) -> Budget {
        Budget {
            time: None,
            iterations: Some(n),
            seed,
        }
    }

    /// Mutated inputs for `time` after the corpus.
    pub fn time(time: Duration, seed: u64) -> Budget {
        Budget {
            time: Some(time),
            iterations: None,
            seed,
        }
    }

    /// `GANGWAY_FUZZ_SECONDS` (default 3) and `GANGWAY_FUZZ_SEED` (default
    /// 1); a value that is not a number is an error naming the variable.
    pub fn from_env() -> Result<Budget, String> {
        let number = |name: &str, default: u64| -> Result<u64, String> {
            match std::env::var(name) {
                Ok(v) => v
                    .trim()
                    .parse()
                    .map_err(|e| format!("{name}={v:?} is not a whole number: {e}")),
                Err(_) => Ok(default),
            }
        };
        Ok(Budget::time(
            Duration::from_secs(number("GANGWAY_FUZZ_SECONDS", 3)?),
            number("GANGWAY_FUZZ_SEED", 1)?,
        ))
    }
}

/// What a run did.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Stats {
    /// Inputs run (corpus and mutations).
    pub executions: u64,
    /// Corpus inputs.
    pub corpus: usize,
    /// Time taken.
    pub elapsed: Duration,
    /// The seed.
    pub seed: u64,
}

/// An input that made a target panic.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Crash {
    /// The target.
    pub target: &'static str,
    /// The input.
    pub input: Vec<u8>,
    /// The panic's message.
    pub message: String,
    /// Where the input was saved, if it could be.
    pub saved: Option<PathBuf>,
}

impl std::fmt::Display for Crash {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let head: Vec<String> = self
            .input
            .iter()
            .take(64)
            .map(|b| format!("{b:02x}"))
            .collect();
        write!(
            f,
            "fuzz target {} panicked: {} (input of {} bytes, starting {}{})",
            self.target,
            self.message,
            self.input.len(),
            head.join(""),
            match &self.saved {
                Some(p) => format!("; saved to {}", p.display()),
                None => String::new(),
            }
        )
    }
}

/// Every file of `dir` (a target's corpus), sorted by name; no directory
/// is an empty corpus.
pub fn corpus(dir: &Path) -> std::io::Result<Vec<Vec<u8>>> {
    let entries = match std::fs::read_dir(dir) {
        Ok(e) => e,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(Vec::new()),
        Err(e) => return Err(e),
    };
    let mut paths: Vec<PathBuf> = entries
        .map(|e| e.map(|e| e.path()))
        .collect::<Result<_, _>>()?;
    paths.retain(|p| p.is_file());
    paths.sort();
    paths.into_iter().map(std::fs::read).collect()
}

/// Runs `target` on every corpus input, then on mutations of them until the
/// budget is spent; stops at the first panic.
pub fn run(target: &Target, corpus: &[Vec<u8>], budget: &Budget) -> Result<Stats, Crash> {
    let start = Instant::now();
    let mut executions = 0u64;
    let mut exec = |input: &[u8]| -> Result<(), Crash> {
        executions += 1;
        catch_unwind(AssertUnwindSafe(|| (target.run)(input))).map_err(|payload| {
            let message = payload
                .downcast_ref::<&str>()
                .map(|s| s.to_string())
                .or_else(|| payload.downcast_ref::<String>().cloned())
                .unwrap_or_else(|| "(a panic without a message)".into());
            Crash {
                target: target.name,
                input: input.to_vec(),
                message,
                saved: save(target.name, input),
            }
        })
    };
    for input in corpus {
        exec(input)?;
    }
    let mut rng = ChaCha8Rng::seed_from_u64(budget.seed);
    let mut mutated = 0u64;
    loop {
        if budget.iterations.is_some_and(|n| mutated >= n)
            || budget.time.is_some_and(|t| start.elapsed() >= t)
        {
            break;
        }
        let mut input = match corpus.len() {
            0 => Vec::new(),
            n => corpus[rng.random_range(0..n)].clone(),
        };
        for _ in 0..rng.random_range(1..=4) {
            mutate(&mut input, corpus, target.dictionary, &mut rng);
        }
        exec(&input)?;
        mutated += 1;
    }
    Ok(Stats {
        executions,
        corpus: corpus.len(),
        elapsed: start.elapsed(),
        seed: budget.seed,
    })
}

/// Saves a crashing input under `target/fuzz-crashes/`, for a regression
/// test or a libFuzzer run.
fn save(target: &str, input: &[u8]) -> Option<PathBuf> {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("../target/fuzz-crashes");
    std::fs::create_dir_all(&dir).ok()?;
    let hash = input.iter().fold(0xcbf2_9ce4_8422_2325u64, |h, b| {
        (h ^ u64::from(*b)).wrapping_mul(0x0100_0000_01b3)
    });
    let path = dir.join(format!("{target}-{hash:016x}"));
    std::fs::write(&path, input).ok()?;
    Some(path)
}

/// Byte values that often sit on a boundary.
const INTERESTING: [u8; 9] = [0, 1, 0x7f, 0x80, 0xff, b'0', b'-', b',', b'\n'];

/// One random mutation of `input`.
fn mutate(input: &mut Vec<u8>, corpus: &[Vec<u8>], dictionary: &[&[u8]], rng: &mut ChaCha8Rng) {
    let len = input.len();
    let at = |rng: &mut ChaCha8Rng| {
        if len == 0 {
            0
        } else {
            rng.random_range(0..len)
        }
    };
    match rng.random_range(0..9u8) {
        0 if len > 0 => {
            let i = at(rng);
            input[i] ^= 1 << rng.random_range(0..8);
        }
        1 if len > 0 => {
            let i = at(rng);
            input[i] = INTERESTING[rng.random_range(0..INTERESTING.len())];
        }
        2 if len > 0 => {
            let i = at(rng);
            input[i] = rng.random();
        }
        3 if !dictionary.is_empty() => {
            let token = dictionary[rng.random_range(0..dictionary.len())];
            let i = if len == 0 {
                0
            } else {
                rng.random_range(0..=len)
            };
            input.splice(i..i, token.iter().copied());
        }
        4 if len > 0 => {
            let i = at(rng);
            let n = rng.random_range(1..=(len - i).min(16));
            input.drain(i..i + n);
        }
        5 if len > 0 => {
            let i = at(rng);
            let n = rng.random_range(1..=(len - i).min(64));
            let chunk = input[i..i + n].to_vec();
            let j = rng.random_range(0..=len);
            input.splice(j..j, chunk);
        }
        6 if !corpus.is_empty() => {
            let other = &corpus[rng.random_range(0..corpus.len())];
            if !other.is_empty() {
                let i = rng.random_range(0..other.len());
                let cut = if len == 0 {
                    0
                } else {
                    rng.random_range(0..=len)
                };
                input.truncate(cut);
                input.extend_from_slice(&other[i..]);
            }
        }
        7 if len > 0 => input.truncate(at(rng)),
        _ => {
            let n = rng.random_range(1..=8);
            let i = if len == 0 {
                0
            } else {
                rng.random_range(0..=len)
            };
            let bytes: Vec<u8> = (0..n).map(|_| rng.random()).collect();
            input.splice(i..i, bytes);
        }
    }
    // Keep inputs small enough that every target stays fast.
    input.truncate(1 << 16);
}

#[cfg(test)]
mod tests {
    use super::*;

    fn picky(data: &[u8]) {
        assert!(!data.starts_with(b"BAD"), "found it");
    }

    #[test]
    fn finds_a_planted_crash_and_saves_it() {
        let target = Target {
            name: "picky",
            about: "panics on inputs starting with BAD",
            run: picky,
            dictionary: &[b"BAD"],
        };
        let corpus = vec![b"GOOD".to_vec()];
        let crash = run(&target, &corpus, &Budget::iterations(100_000, 7)).unwrap_err();
        assert!(crash.input.starts_with(b"BAD"));
        assert_eq!(crash.message, "found it");
        let saved = crash.saved.clone().unwrap();
        assert_eq!(std::fs::read(&saved).unwrap(), crash.input);
        assert!(
            crash
                .to_string()
                .contains("fuzz target picky panicked: found it")
        );
    }

    #[test]
    fn the_same_seed_replays_the_same_inputs() {
        let mut a = b"seed input".to_vec();
        let mut b = a.clone();
        let (mut ra, mut rb) = (ChaCha8Rng::seed_from_u64(3), ChaCha8Rng::seed_from_u64(3));
        for _ in 0..100 {
            mutate(&mut a, &[], &[b"x"], &mut ra);
            mutate(&mut b, &[], &[b"x"], &mut rb);
        }
        assert_eq!(a, b);
    }
}
