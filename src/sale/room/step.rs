//! One inlet step as `lua/room_admit.lua` records it in the room's steps list: read by
//! the instance's copy ([`super::room_view`]) and by the wait's estimate
//! ([`super::estimate`]), neither of which the other imports for it.

/// One inlet step: the places `from .. to` were reached at `at_ms`, all admitted but
/// `skipped` (abandoned).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Step {
    /// The serving position before the step.
    pub from: u64,
    /// The serving position after it.
    pub to: u64,
    /// When it ran, ms.
    pub at_ms: i64,
    /// The places it skipped as abandoned.
    pub skipped: Vec<u64>,
}

impl Step {
    /// `"<from>:<to>:<at ms>:<skipped, comma-separated>"`, as `lua/room_admit.lua`
    /// records it.
    pub fn parse(text: &str) -> Option<Self> {
        let mut parts = text.splitn(4, ':');
        let from = parts.next()?.parse().ok()?;
        let to = parts.next()?.parse().ok()?;
        let at_ms = parts.next()?.parse().ok()?;
        let skipped = match parts.next()? {
            "" => Vec::new(),
            list => list
                .split(',')
                .map(str::parse)
                .collect::<Result<_, _>>()
                .ok()?,
        };
        Some(Self {
            from,
            to,
            at_ms,
            skipped,
        })
    }

    /// Places the step admitted.
    pub fn admitted(&self) -> u64 {
        (self.to - self.from).saturating_sub(self.skipped.len() as u64)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_step_reads_back_as_the_admit_script_records_it() {
        let step = |from, to, at_ms, skipped: Vec<u64>| Step {
            from,
            to,
            at_ms,
            skipped,
        };
        assert_eq!(Step::parse("3:6:200:"), Some(step(3, 6, 200, vec![])));
        assert_eq!(
            Step::parse("0:3:100:1,2"),
            Some(step(0, 3, 100, vec![1, 2]))
        );
        assert_eq!(Step::parse("0:3:100"), None);
        assert_eq!(step(0, 3, 100, vec![1]).admitted(), 2);
    }
}
