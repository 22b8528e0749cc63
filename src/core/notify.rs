//! `notify-keyspace-events`: the event classes (Redis's NOTIFY_* bits) and
//! the setting's text to bits. The core's hot config mirrors the setting;
//! publishing the notifications is `commands/events.rs`.

/// Event classes, as Redis's NOTIFY_* bits.
pub(crate) mod class {
    pub(crate) const KEYSPACE: u32 = 1 << 0; // K
    pub(crate) const KEYEVENT: u32 = 1 << 1; // E
    pub(crate) const GENERIC: u32 = 1 << 2; // g
    pub(crate) const STRING: u32 = 1 << 3; // $
    pub(crate) const LIST: u32 = 1 << 4; // l
    pub(crate) const SET: u32 = 1 << 5; // s
    pub(crate) const HASH: u32 = 1 << 6; // h
    pub(crate) const ZSET: u32 = 1 << 7; // z
    pub(crate) const EXPIRED: u32 = 1 << 8; // x
    pub(crate) const EVICTED: u32 = 1 << 9; // e
    pub(crate) const STREAM: u32 = 1 << 10; // t
    pub(crate) const KEY_MISS: u32 = 1 << 11; // m
    pub(crate) const MODULE: u32 = 1 << 12; // d
    pub(crate) const NEW: u32 = 1 << 13; // n
    /// 'A': every class but key-miss and new (Redis's NOTIFY_ALL).
    pub(crate) const ALL: u32 =
        GENERIC | STRING | LIST | SET | HASH | ZSET | EXPIRED | EVICTED | STREAM | MODULE;
}

/// `notify-keyspace-events` text to class bits (Redis's
/// keyspaceEventsStringToFlags); unknown characters are ignored here, the
/// config layer rejects them.
pub(crate) fn parse_classes(s: &str) -> u32 {
    s.chars().fold(0, |f, c| {
        f | match c {
            'A' => class::ALL,
            'g' => class::GENERIC,
            '$' => class::STRING,
            'l' => class::LIST,
            's' => class::SET,
            'h' => class::HASH,
            'z' => class::ZSET,
            'x' => class::EXPIRED,
            'e' => class::EVICTED,
            'K' => class::KEYSPACE,
            'E' => class::KEYEVENT,
            't' => class::STREAM,
            'm' => class::KEY_MISS,
            'd' => class::MODULE,
            'n' => class::NEW,
            _ => 0,
        }
    })
}
