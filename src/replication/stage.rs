//! The stages of a replica's link to its master: what INFO replication
//! (`master_sync_stage`, `master_sync_stage_seconds`) and ROLE show, and
//! what a stage that times out was waiting for.
//!
//! Every stage but `connected` ends within `repl-timeout` of its last
//! progress (a byte from the master, or a byte the loader took): the link
//! logs Redis's warning for that state, followed by what it waited for,
//! and starts over. `connected` ends the same way when the master sends
//! nothing, not even its PINGs.

use std::sync::atomic::{AtomicU64, AtomicU8, Ordering::Relaxed};

use crate::keyspace::hlc::unix_ms;

/// One stage of the link, in the order a sync goes through them (Redis's
/// `repl_state`s, with the transfer split in three).
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub(crate) enum Stage {
    /// Waiting to connect (the pause between attempts).
    Connect,
    /// The TCP connection is being set up.
    Connecting,
    ReceivePingReply,
    ReceiveAuthReply,
    ReceivePortReply,
    ReceiveIpReply,
    ReceiveCapaReply,
    ReceivePsyncReply,
    /// After +FULLRESYNC: the `$<len>` or `$EOF:<mark>` line (the master
    /// sends newlines meanwhile).
    ReceivePayloadHeader,
    /// The RDB's bytes (decoded as they come with `repl-diskless-load`).
    ReceivePayload,
    /// The received file is loaded (`repl-diskless-load disabled`).
    Loading,
    Connected,
}

const ALL: [Stage; 12] = [
    Stage::Connect,
    Stage::Connecting,
    Stage::ReceivePingReply,
    Stage::ReceiveAuthReply,
    Stage::ReceivePortReply,
    Stage::ReceiveIpReply,
    Stage::ReceiveCapaReply,
    Stage::ReceivePsyncReply,
    Stage::ReceivePayloadHeader,
    Stage::ReceivePayload,
    Stage::Loading,
    Stage::Connected,
];

impl Stage {
    /// INFO's `master_sync_stage`.
    pub(crate) fn name(self) -> &'static str {
        match self {
            Stage::Connect => "connect",
            Stage::Connecting => "connecting",
            Stage::ReceivePingReply => "receive-ping-reply",
            Stage::ReceiveAuthReply => "receive-auth-reply",
            Stage::ReceivePortReply => "receive-port-reply",
            Stage::ReceiveIpReply => "receive-ip-reply",
            Stage::ReceiveCapaReply => "receive-capa-reply",
            Stage::ReceivePsyncReply => "receive-psync-reply",
            Stage::ReceivePayloadHeader => "receive-payload-header",
            Stage::ReceivePayload => "receive-payload",
            Stage::Loading => "loading",
            Stage::Connected => "connected",
        }
    }

    /// ROLE's state, as Redis names it.
    pub(crate) fn role_state(self) -> &'static str {
        match self {
            Stage::Connect => "connect",
            Stage::Connecting => "connecting",
            Stage::ReceivePayloadHeader | Stage::ReceivePayload | Stage::Loading => "sync",
            Stage::Connected => "connected",
            _ => "handshake",
        }
    }

    /// INFO's master_sync_in_progress (Redis's transfer state).
    pub(crate) fn syncing(self) -> bool {
        matches!(
            self,
            Stage::ReceivePayloadHeader | Stage::ReceivePayload | Stage::Loading
        )
    }

    fn awaited(self) -> &'static str {
        match self {
            Stage::Connect => "the next attempt",
            Stage::Connecting => "the TCP connection",
            Stage::ReceivePingReply => "the reply to PING",
            Stage::ReceiveAuthReply => "the reply to AUTH",
            Stage::ReceivePortReply => "the reply to REPLCONF listening-port",
            Stage::ReceiveIpReply => "the reply to REPLCONF ip-address",
            Stage::ReceiveCapaReply => "the reply to REPLCONF capa",
            Stage::ReceivePsyncReply => "the reply to PSYNC",
            Stage::ReceivePayloadHeader => "the payload's $<length> or $EOF:<mark> line",
            Stage::ReceivePayload => "the payload's next bytes",
            Stage::Loading => "the loader to take more of the payload",
            Stage::Connected => "data or a PING",
        }
    }

    /// The warning of a timeout in this stage: Redis's (its
    /// replicationCron's, by state), then what the link waited for.
    pub(crate) fn timeout_message(self, secs: u64) -> String {
        let redis = match self {
            Stage::ReceivePayloadHeader | Stage::ReceivePayload => {
                "Timeout receiving bulk data from MASTER... If the problem persists try to set the 'repl-timeout' parameter in redis.conf to a larger value."
            }
            Stage::Loading => "Timeout loading the payload from MASTER...",
            Stage::Connected => "MASTER timeout: no data nor PING received...",
            _ => "Timeout connecting to the MASTER...",
        };
        format!("{redis} (waited {secs} s for {})", self.awaited())
    }
}

/// The current stage and since when (unix ms), readable without a lock.
#[derive(Default)]
pub(crate) struct StageClock {
    stage: AtomicU8,
    since_ms: AtomicU64,
}

impl StageClock {
    pub(crate) fn set(&self, s: Stage) {
        self.since_ms.store(unix_ms(), Relaxed);
        self.stage.store(s as u8, Relaxed);
    }

    pub(crate) fn get(&self) -> Stage {
        ALL[self.stage.load(Relaxed) as usize]
    }

    /// Whole seconds in the current stage.
    pub(crate) fn seconds(&self) -> u64 {
        unix_ms().saturating_sub(self.since_ms.load(Relaxed)) / 1000
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_stage_round_trips_through_the_clock() {
        let clock = StageClock::default();
        assert_eq!(clock.get(), Stage::Connect);
        for (i, s) in ALL.iter().enumerate() {
            assert_eq!(*s as usize, i);
            clock.set(*s);
            assert_eq!(clock.get(), *s);
        }
        assert_eq!(clock.seconds(), 0);
    }

    #[test]
    fn timeouts_use_redis_wording() {
        let m = Stage::ReceivePsyncReply.timeout_message(60);
        assert_eq!(
            m,
            "Timeout connecting to the MASTER... (waited 60 s for the reply to PSYNC)"
        );
        assert!(Stage::ReceivePayload
            .timeout_message(5)
            .starts_with("Timeout receiving bulk data from MASTER..."));
        assert_eq!(Stage::ReceiveCapaReply.role_state(), "handshake");
    }
}
