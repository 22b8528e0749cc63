//! `oom-score-adj` and `oom-score-adj-values`: the kernel's OOM-killer
//! adjustment of this process (/proc/self/oom_score_adj), set as Redis
//! 7.0's setOOMScoreAdj sets it.
//!
//! The values are three: a master's, a replica's and a background child's.
//! The process takes the first or the second by its role (the log's role
//! tag, which REPLICAOF and promotion set: [`role_changed`] runs then);
//! `relative` (and `yes`) adds the value to the score the process had
//! before we first changed it, `absolute` writes it as it is, both clamped
//! to [-1000, 1000]; `no` after a change writes that first score back. The
//! third value is checked, kept and shown, but nothing takes it: Redis
//! gives it to its fork children, and our snapshots and rewrites are
//! threads of this one process, which keeps its role's score (DECISIONS
//! 338). A failed write changes nothing here: CONFIG SET then answers
//! Redis's error and keeps the old values (the caller's part).

use parking_lot::Mutex;

/// What we last applied, and the score from before our first change
/// (`Some` while the score is ours: Redis's oom_score_adjusted_by_redis).
#[derive(Clone, Copy)]
struct State {
    relative: bool,
    on: bool,
    values: [i32; 3],
    base: Option<i32>,
}

static STATE: Mutex<State> = Mutex::new(State {
    relative: true,
    on: false,
    values: [0, 200, 800],
    base: None,
});

const PROC_FILE: &str = "/proc/self/oom_score_adj";

/// The three values of `oom-score-adj-values` (already checked).
fn parse_values(v: &str) -> [i32; 3] {
    let mut out = [0, 200, 800];
    for (o, w) in out.iter_mut().zip(v.split_whitespace()) {
        *o = w.parse().unwrap_or(0);
    }
    out
}

/// Which value the process takes now: a replica's or a master's.
fn class() -> usize {
    usize::from(crate::log::role_tag() == b'S')
}

/// Applies `mode` (`no`, `yes`, `relative`, `absolute`) and `values` for the
/// process's role. On an error (logged) nothing changed.
pub fn apply(mode: &str, values: &str) -> Result<(), String> {
    let values = parse_values(values);
    let mut st = STATE.lock();
    if values != st.values && (values[1] < values[0] || values[2] < values[1]) {
        crate::log_warning!("The oom-score-adj-values configuration may not work for non-privileged processes! Please consult the documentation.");
    }
    let next = State {
        relative: mode != "absolute",
        on: mode != "no",
        values,
        base: st.base,
    };
    *st = write_for(next)?;
    Ok(())
}

/// After the role changed (REPLICAOF, promotion): the role's value.
pub fn role_changed() {
    let mut st = STATE.lock();
    if let Ok(next) = write_for(*st) {
        *st = next;
    }
}

/// Writes the score `next` asks for; returns the state to keep.
fn write_for(mut next: State) -> Result<State, String> {
    let score = if next.on {
        let base = match next.base {
            Some(b) => b,
            None => read_score()?,
        };
        next.base = Some(base);
        let v = next.values[class()] + if next.relative { base } else { 0 };
        v.clamp(-1000, 1000)
    } else if let Some(base) = next.base.take() {
        base
    } else {
        return Ok(next);
    };
    std::fs::write(PROC_FILE, format!("{score}\n")).map_err(|e| {
        crate::log_warning!("Unable to write oom_score_adj: {e}");
        "Failed to set current oom_score_adj. Check server logs.".to_string()
    })?;
    Ok(next)
}

fn read_score() -> Result<i32, String> {
    let s = std::fs::read_to_string(PROC_FILE).map_err(|e| {
        crate::log_warning!("Unable to read oom_score_adj: {e}");
        "Failed to set current oom_score_adj. Check server logs.".to_string()
    })?;
    Ok(s.trim().parse().unwrap_or(0))
}

#[cfg(test)]
mod tests {
    #[test]
    fn values_parse_in_order() {
        assert_eq!(super::parse_values("10 -20 2000"), [10, -20, 2000]);
        assert_eq!(super::parse_values("0 200 800"), [0, 200, 800]);
    }
}
