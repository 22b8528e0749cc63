/*
 * One ACL user (Redis 7.0's model): its flags, password hashes and
 * selectors, the SETUSER rules that change them, the check of one command
 * line against them, and the text ACL LIST and ACL GETUSER show.
 *
 * A selector is what a user may do: a bit per command-table id (a
 * container's subcommands have ids of their own), first arguments allowed
 * for an otherwise denied command (`+select|0`), key patterns with their
 * read/write permission, channel patterns. The first selector is the
 * root one (the rules written outside parentheses); a command is allowed
 * when any selector allows it whole (command, every key, every channel).
 *
 * A user value is never changed in place once published: SETUSER applies
 * its rules to a copy and swaps it in whole (`Acl::set_user`), so a rule
 * that fails leaves the user as it was, as Redis does.
 */

use sha2::{Digest, Sha256};

use crate::core::table::{Command, CommandId, CommandTable, ACL_CATEGORIES};
use crate::glob::glob_match;
use crate::protocol::Args;

/// Key pattern permissions (`%R~`, `%W~`, `~` is both).
pub(crate) const READ: u8 = 1;
pub(crate) const WRITE: u8 = 2;

#[derive(Clone, Debug, PartialEq)]
pub struct KeyPattern {
    pub pattern: Vec<u8>,
    pub perm: u8,
    /// `pattern` is a literal followed by one `*` (`~app:*`): matched by a
    /// prefix comparison, decided once when the rule is added.
    prefix: bool,
}

impl KeyPattern {
    fn new(pattern: &[u8], perm: u8) -> KeyPattern {
        let prefix = pattern.split_last().is_some_and(|(&last, rest)| {
            last == b'*' && !rest.iter().any(|b| matches!(b, b'*' | b'?' | b'[' | b'\\'))
        });
        KeyPattern {
            pattern: pattern.to_vec(),
            perm,
            prefix,
        }
    }

    /// Whether `key` matches the pattern (Redis's stringmatchlen).
    fn matches(&self, key: &[u8]) -> bool {
        match self.prefix {
            true => key.starts_with(&self.pattern[..self.pattern.len() - 1]),
            false => glob_match(&self.pattern, key, false),
        }
    }
}

#[derive(Clone, Debug, Default, PartialEq)]
pub struct Selector {
    /// One bit per command id.
    bits: Vec<u64>,
    /// Redis's reserved "future commands" bit: set by `+@all`, cleared only
    /// by `-@all`; ACL LIST starts from `+@all` when it is set.
    future: bool,
    /// `allcommands`: every command, skipping the bit test; cleared by any
    /// rule that removes a command.
    all_commands: bool,
    first_args: Vec<(CommandId, Vec<Vec<u8>>)>,
    pub all_keys: bool,
    pub keys: Vec<KeyPattern>,
    pub all_channels: bool,
    pub channels: Vec<Vec<u8>>,
}

/// Why a rule was refused (Redis's ACLSetUserStringError texts).
#[derive(Debug, PartialEq)]
pub enum RuleError {
    Syntax,
    Unknown,
    KeyAfterAll,
    ChannelAfterAll,
    NoSuchPassword,
    BadHash,
    FirstArgOfSub,
}

impl RuleError {
    pub fn text(&self) -> &'static str {
        match self {
            RuleError::Syntax => "Syntax error",
            RuleError::Unknown => "Unknown command or category name in ACL",
            RuleError::KeyAfterAll => "Adding a pattern after the * pattern (or the 'allkeys' flag) is not valid and does not have any effect. Try 'resetkeys' to start with an empty list of patterns",
            RuleError::ChannelAfterAll => "Adding a pattern after the * pattern (or the 'allchannels' flag) is not valid and does not have any effect. Try 'resetchannels' to start with an empty list of channels",
            RuleError::NoSuchPassword => "The password you are trying to remove from the user does not exist",
            RuleError::BadHash => "The password hash must be exactly 64 characters and contain only lowercase hexadecimal characters",
            RuleError::FirstArgOfSub => "Allowing first-arg of a subcommand is not supported",
        }
    }
}

/// Why a command line was refused, with the argument at fault.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub enum Denied {
    Command,
    Key(usize),
    Channel(usize),
}

fn has_space(s: &[u8]) -> bool {
    s.iter().any(|&b| b == b' ' || b == 0)
}

impl Selector {
    pub fn new(pubsub_all: bool) -> Selector {
        Selector {
            all_channels: pubsub_all,
            ..Default::default()
        }
    }

    fn bit(&self, id: CommandId) -> bool {
        self.bits
            .get(id / 64)
            .is_some_and(|w| w & (1 << (id % 64)) != 0)
    }

    fn set_bit(&mut self, id: CommandId, on: bool) {
        if self.bits.len() <= id / 64 {
            self.bits.resize(id / 64 + 1, 0);
        }
        if on {
            self.bits[id / 64] |= 1 << (id % 64);
        } else {
            self.bits[id / 64] &= !(1 << (id % 64));
            self.all_commands = false;
        }
    }

    /// Allows or denies a command, a container with all its subcommands.
    fn change(&mut self, t: &CommandTable, id: CommandId, on: bool) {
        self.set_bit(id, on);
        self.first_args.retain(|(c, _)| *c != id);
        for sub in t.sub_ids(id) {
            self.set_bit(sub, on);
        }
    }

    fn set_all(&mut self, t: &CommandTable, on: bool) {
        let n = t.all.len().div_ceil(64);
        self.bits = vec![if on { u64::MAX } else { 0 }; n];
        self.future = on;
        self.all_commands = on;
        self.first_args.clear();
    }

    fn set_category(&mut self, t: &CommandTable, bit: u32, on: bool) {
        for id in 0..t.all.len() {
            if t.categories[id] & bit != 0 {
                self.change(t, id, on);
            }
        }
    }

    /// Applies one selector rule (Redis's ACLSetSelector).
    pub fn apply(&mut self, t: &CommandTable, op: &[u8]) -> Result<(), RuleError> {
        let lower = op.to_ascii_lowercase();
        match &lower[..] {
            b"allkeys" | b"~*" => {
                self.all_keys = true;
                self.keys.clear();
            }
            b"resetkeys" => {
                self.all_keys = false;
                self.keys.clear();
            }
            b"allchannels" | b"&*" => {
                self.all_channels = true;
                self.channels.clear();
            }
            b"resetchannels" => {
                self.all_channels = false;
                self.channels.clear();
            }
            b"allcommands" | b"+@all" => self.set_all(t, true),
            b"nocommands" | b"-@all" => self.set_all(t, false),
            _ => return self.apply_pattern_or_command(t, op),
        }
        Ok(())
    }

    fn apply_pattern_or_command(&mut self, t: &CommandTable, op: &[u8]) -> Result<(), RuleError> {
        match op.first() {
            Some(b'~' | b'%') => self.add_key_pattern(op),
            Some(b'&') => self.add_channel(&op[1..]),
            Some(b'+') if op.get(1) != Some(&b'@') => self.allow_command(t, &op[1..]),
            Some(b'-') if op.get(1) != Some(&b'@') => {
                let id = t.lookup_full(&op[1..]).ok_or(RuleError::Unknown)?;
                self.change(t, id, false);
                Ok(())
            }
            Some(b'+' | b'-') => {
                let bit = crate::core::table::category_bit(&op[2..]).ok_or(RuleError::Unknown)?;
                self.set_category(t, bit, op[0] == b'+');
                Ok(())
            }
            _ => Err(RuleError::Syntax),
        }
    }

    fn add_key_pattern(&mut self, op: &[u8]) -> Result<(), RuleError> {
        if self.all_keys {
            return Err(RuleError::KeyAfterAll);
        }
        let (perm, at) = if op[0] == b'%' {
            let mut perm = 0;
            let mut at = None;
            for (i, &b) in op.iter().enumerate().skip(1) {
                match b.to_ascii_uppercase() {
                    b'R' if perm & READ == 0 => perm |= READ,
                    b'W' if perm & WRITE == 0 => perm |= WRITE,
                    b'~' => {
                        at = Some(i + 1);
                        break;
                    }
                    _ => return Err(RuleError::Syntax),
                }
            }
            if perm == 0 {
                return Err(RuleError::Syntax);
            }
            (perm, at.unwrap_or(op.len()))
        } else {
            (READ | WRITE, 1)
        };
        let pattern = &op[at..];
        if has_space(pattern) {
            return Err(RuleError::Syntax);
        }
        match self.keys.iter_mut().find(|k| k.pattern == pattern) {
            Some(k) => k.perm |= perm,
            None => self.keys.push(KeyPattern::new(pattern, perm)),
        }
        self.all_keys = false;
        Ok(())
    }

    fn add_channel(&mut self, pattern: &[u8]) -> Result<(), RuleError> {
        if self.all_channels {
            return Err(RuleError::ChannelAfterAll);
        }
        if has_space(pattern) {
            return Err(RuleError::Syntax);
        }
        if !self.channels.iter().any(|c| c == pattern) {
            self.channels.push(pattern.to_vec());
        }
        Ok(())
    }

    /// `+cmd`, `+container|sub`, or `+cmd|first-arg`.
    fn allow_command(&mut self, t: &CommandTable, name: &[u8]) -> Result<(), RuleError> {
        let Some(bar) = name.iter().rposition(|&b| b == b'|') else {
            let id = t.lookup(name).ok_or(RuleError::Unknown)?;
            self.change(t, id, true);
            return Ok(());
        };
        let (base, sub) = (&name[..bar], &name[bar + 1..]);
        let id = t.lookup_full(base).ok_or(RuleError::Unknown)?;
        if base.contains(&b'|') {
            return Err(RuleError::FirstArgOfSub);
        }
        if sub.is_empty() {
            return Err(RuleError::Syntax);
        }
        if t.has_subcommands(id) {
            let sid = t.lookup_sub(id, sub).ok_or(RuleError::Unknown)?;
            self.change(t, sid, true);
            return Ok(());
        }
        crate::log_warning!(
            "Deprecation warning: Allowing a first arg of an otherwise blocked command is a misuse of ACL and may get disabled in the future (offender: +{})",
            String::from_utf8_lossy(name)
        );
        let lower = sub.to_ascii_lowercase();
        match self.first_args.iter_mut().find(|(c, _)| *c == id) {
            Some((_, v)) if v.contains(&lower) => {}
            Some((_, v)) => v.push(lower),
            None => self.first_args.push((id, vec![lower])),
        }
        Ok(())
    }

    /// Whether this selector lets `args` run (Redis's ACLSelectorCheckCmd).
    fn check(&self, t: &CommandTable, id: CommandId, args: Args) -> Result<(), Denied> {
        let cmd = t.get(id);
        if !self.all_commands
            && cmd.flags & crate::core::table::flags::NO_AUTH == 0
            && !self.bit(id)
        {
            let idx = if is_sub(t, id) { 2 } else { 1 };
            let allowed = args.len() > idx
                && self.first_args.iter().any(|(c, v)| {
                    *c == id && v.iter().any(|a| a.eq_ignore_ascii_case(args.get(idx)))
                });
            if !allowed {
                return Err(Denied::Command);
            }
        }
        if !self.all_keys {
            self.check_keys(cmd, args)?;
        }
        if !self.all_channels && cmd.flags & crate::core::table::flags::PUBSUB != 0 {
            self.check_channels(cmd.name, args)?;
        }
        Ok(())
    }

    fn check_keys(&self, cmd: &Command, args: Args) -> Result<(), Denied> {
        use crate::core::table::flags::PUBSUB;
        // `~pat` patterns allow any access: the key's flags matter only
        // when some pattern is read- or write-only, or a spec names what
        // is not a key (a shard channel, Redis's CMD_KEY_NOT_KEY).
        let partial = self.keys.iter().any(|k| k.perm != READ | WRITE);
        let not_keys =
            cmd.flags & PUBSUB != 0 && cmd.key_specs.iter().any(|s| s.flags.contains(&"not_key"));
        let check = |pos: usize| {
            let flags = match partial || not_keys {
                true => crate::core::keyspec::flags_for(cmd, args, pos),
                false => &[],
            };
            if flags.contains(&"not_key") {
                return Ok(());
            }
            let need = key_access(flags);
            let key = args.get(pos);
            let ok = self
                .keys
                .iter()
                .any(|k| k.perm & need == need && k.matches(key));
            if ok {
                Ok(())
            } else {
                Err(Denied::Key(pos))
            }
        };
        // The common first/last/step form without a vector (the hot path
        // of a restricted user's GET and SET).
        if cmd.keys_fn.is_none() && cmd.first_key > 0 {
            let argc = args.len() as i32;
            let last = match cmd.last_key < 0 {
                true => argc + cmd.last_key,
                false => cmd.last_key.min(argc - 1),
            };
            let step = cmd.key_step.max(1) as usize;
            for pos in (cmd.first_key as usize..=last.max(0) as usize).step_by(step) {
                if pos < args.len() {
                    check(pos)?;
                }
            }
            return Ok(());
        }
        cmd.key_positions(args).into_iter().try_for_each(check)
    }

    fn check_channels(&self, name: &str, args: Args) -> Result<(), Denied> {
        let (from, to, pattern) = match name {
            "publish" | "spublish" => (1, 2.min(args.len()), false),
            "subscribe" | "ssubscribe" => (1, args.len(), false),
            "psubscribe" => (1, args.len(), true),
            _ => return Ok(()),
        };
        for pos in from..to {
            if !self.channel_ok(args.get(pos), pattern) {
                return Err(Denied::Channel(pos));
            }
        }
        Ok(())
    }

    /// A channel (matched against the patterns) or, for PSUBSCRIBE, a
    /// pattern (compared literally), as Redis's ACLCheckChannelAgainstList.
    pub fn channel_ok(&self, channel: &[u8], is_pattern: bool) -> bool {
        self.all_channels
            || self.channels.iter().any(|p| {
                if is_pattern {
                    p == channel
                } else {
                    glob_match(p, channel, false)
                }
            })
    }

    /// The command rules as ACL LIST and GETUSER show them: `+@all` or
    /// `-@all`, then the categories that best fit the bits, then single
    /// commands (Redis's ACLDescribeSelectorCommandRules algorithm).
    pub fn describe_commands(&self, t: &CommandTable) -> String {
        let mut rules = String::new();
        let mut fake = Selector::default();
        let additive = !self.future;
        fake.set_all(t, !additive);
        rules.push_str(if additive { "-@all " } else { "+@all " });
        // `temp` has the categories already chosen undone, so each round
        // counts only what is left to explain.
        let mut temp = self.clone();
        let mut applied = [false; 32];
        loop {
            let mut best = None;
            let (mut mindiff, mut maxsame) = (usize::MAX, 0);
            for (j, _) in ACL_CATEGORIES.iter().enumerate() {
                if applied[j] {
                    continue;
                }
                let (on, off) = temp.count_category(t, 1 << j);
                let (diff, same) = if additive { (off, on) } else { (on, off) };
                if same > diff && (diff < mindiff || (diff == mindiff && same > maxsame)) {
                    best = Some(j);
                    mindiff = diff;
                    maxsame = same;
                }
            }
            let Some(j) = best else { break };
            fake.set_category(t, 1 << j, additive);
            temp.set_category(t, 1 << j, !additive);
            rules.push_str(if additive { "+@" } else { "-@" });
            rules.push_str(ACL_CATEGORIES[j]);
            rules.push(' ');
            applied[j] = true;
        }
        for id in 0..t.all.len() {
            let (user, f) = (self.bit(id), fake.bit(id));
            if user != f {
                rules.push(if user { '+' } else { '-' });
                rules.push_str(&t.full_names[id]);
                rules.push(' ');
                fake.change(t, id, user);
            }
            if user {
                continue;
            }
            for (_, v) in self.first_args.iter().filter(|(c, _)| *c == id) {
                for a in v {
                    rules.push_str(&format!(
                        "+{}|{} ",
                        t.full_names[id],
                        String::from_utf8_lossy(a)
                    ));
                }
            }
        }
        rules.pop();
        rules
    }

    fn count_category(&self, t: &CommandTable, bit: u32) -> (usize, usize) {
        let (mut on, mut off) = (0, 0);
        for id in 0..t.all.len() {
            if t.categories[id] & bit != 0 {
                if self.bit(id) {
                    on += 1;
                } else {
                    off += 1;
                }
            }
        }
        (on, off)
    }

    /// The key patterns as GETUSER shows them (`~*` for allkeys).
    pub fn describe_keys(&self) -> String {
        if self.all_keys {
            return "~*".into();
        }
        let v: Vec<String> = self.keys.iter().map(describe_key).collect();
        v.join(" ")
    }

    pub fn describe_channels(&self) -> String {
        if self.all_channels {
            return "&*".into();
        }
        let v: Vec<String> = self
            .channels
            .iter()
            .map(|c| format!("&{}", String::from_utf8_lossy(c)))
            .collect();
        v.join(" ")
    }

    /// The selector as ACL LIST writes it (Redis's ACLDescribeSelector).
    fn describe(&self, t: &CommandTable) -> String {
        let mut s = String::new();
        if self.all_keys {
            s.push_str("~* ");
        } else {
            for k in &self.keys {
                s.push_str(&describe_key(k));
                s.push(' ');
            }
        }
        if self.all_channels {
            s.push_str("&* ");
        } else {
            s.push_str("resetchannels ");
            for c in &self.channels {
                s.push_str(&format!("&{} ", String::from_utf8_lossy(c)));
            }
        }
        s.push_str(&self.describe_commands(t));
        s
    }

    /// Allows every command, key and channel.
    fn unrestricted(&self) -> bool {
        self.all_commands && self.all_keys && self.all_channels
    }
}

fn describe_key(k: &KeyPattern) -> String {
    let prefix = match k.perm {
        READ => "%R~",
        WRITE => "%W~",
        _ => "~",
    };
    format!("{prefix}{}", String::from_utf8_lossy(&k.pattern))
}

/// The permission a key's spec flags ask for.
fn key_access(flags: &[&str]) -> u8 {
    let mut need = 0;
    for f in flags {
        match *f {
            "access" => need |= READ,
            "insert" | "delete" | "update" => need |= WRITE,
            _ => {}
        }
    }
    need
}

fn is_sub(t: &CommandTable, id: CommandId) -> bool {
    t.full_names[id].contains('|')
}

/// SHA-256 of a password, in lower-case hex (how Redis stores them).
pub(crate) fn hash_password(pass: &[u8]) -> String {
    let digest = Sha256::digest(pass);
    digest.iter().map(|b| format!("{b:02x}")).collect()
}

fn valid_hash(h: &[u8]) -> bool {
    h.len() == 64
        && h.iter()
            .all(|b| b.is_ascii_digit() || (b'a'..=b'f').contains(b))
}

/// Compares two equal-length strings in time independent of where they
/// differ (a password hash must not leak its prefix through timing).
pub(crate) fn constant_time_eq(a: &[u8], b: &[u8]) -> bool {
    if a.len() != b.len() {
        return false;
    }
    let diff = a.iter().zip(b).fold(0u8, |d, (x, y)| d | (x ^ y));
    std::hint::black_box(diff) == 0
}

#[derive(Clone, Debug, PartialEq)]
pub struct User {
    pub name: String,
    pub enabled: bool,
    pub nopass: bool,
    /// `sanitize-payload` (Some(true)) or `skip-sanitize-payload`.
    pub sanitize: Option<bool>,
    /// SHA-256 hashes, lower-case hex.
    pub passwords: Vec<String>,
    /// The root selector first.
    pub selectors: Vec<Selector>,
    /// Every command, key and channel allowed: dispatch checks nothing.
    pub free: bool,
    /// Dispatch's quick test, derived from the rules (`FastPath::of`).
    fast: FastPath,
}

/// The common case of a restricted user, decided before the general
/// check (dispatch's hot path: a restricted user's GET or SET cost ~340
/// instructions more than the default user's through `check` alone). A
/// bit per command allowed whatever its arguments but its keys: its own
/// bit, `allcommands` or no-auth; no channels to check; no keys, or every
/// key, or a first/last/step range (no `keys_fn`) and key patterns all of
/// the form `~prefix*` or `~exact`, compared without the glob matcher.
/// Only for a user without extra selectors; empty (nothing decided)
/// otherwise. A command the bits leave out goes to `check`.
#[derive(Clone, Debug, Default, PartialEq)]
struct FastPath {
    bits: Vec<u64>,
    all_keys: bool,
    keys: Vec<FastKey>,
}

impl FastPath {
    fn of(t: &CommandTable, selectors: &[Selector]) -> FastPath {
        use crate::core::table::flags::{NO_AUTH, PUBSUB};
        let [s] = selectors else {
            return FastPath::default();
        };
        let keys: Option<Vec<FastKey>> = s.keys.iter().map(FastKey::of).collect();
        let keys_fast = s.all_keys || keys.is_some();
        let mut bits = vec![0u64; t.all.len().div_ceil(64)];
        for (id, word) in (0..t.all.len()).map(|id| (id, id / 64)) {
            let cmd = t.get(id);
            let command = s.all_commands || s.bit(id) || cmd.flags & NO_AUTH != 0;
            let channels = s.all_channels || cmd.flags & PUBSUB == 0;
            let keyless = cmd.keys_fn.is_none() && cmd.first_key <= 0;
            let keys = s.all_keys || keyless || (keys_fast && cmd.keys_fn.is_none());
            if command && channels && keys {
                bits[word] |= 1 << (id % 64);
            }
        }
        FastPath {
            bits,
            all_keys: s.all_keys,
            keys: keys.unwrap_or_default(),
        }
    }

    /// Whether the keys of a first/last/step command match the patterns:
    /// a one-key command against a lone pattern inline (GET, SET), the
    /// rest out of line, so that the hot path calls nothing.
    #[inline]
    fn keys_match(&self, cmd: &Command, args: Args) -> bool {
        let pos = cmd.first_key as usize;
        match (cmd.last_key == cmd.first_key, &self.keys[..]) {
            (true, [k]) if pos < args.len() => k.matches(args.get(pos)),
            _ => self.range_keys_match(cmd, args),
        }
    }

    #[inline(never)]
    fn range_keys_match(&self, cmd: &Command, args: Args) -> bool {
        let argc = args.len() as i32;
        let last = match cmd.last_key < 0 {
            true => argc + cmd.last_key,
            false => cmd.last_key.min(argc - 1),
        };
        let step = cmd.key_step.max(1);
        let mut pos = cmd.first_key;
        while pos <= last {
            let key = args.get(pos as usize);
            if !self.keys.iter().any(|k| k.matches(key)) {
                return false;
            }
            pos += step;
        }
        true
    }
}

/// A `~` pattern (read and write) that is a literal, or a literal then
/// one `*`; up to 8 bytes of prefix are compared as one masked word.
#[derive(Clone, Debug, Default, PartialEq)]
struct FastKey {
    literal: Vec<u8>,
    exact: bool,
    /// `literal` as a little-endian word and the mask of its bytes, for a
    /// prefix of at most 8 bytes (`short`).
    word: u64,
    mask: u64,
    short: bool,
}

impl FastKey {
    fn of(k: &KeyPattern) -> Option<FastKey> {
        let special = |b: &u8| matches!(b, b'*' | b'?' | b'[' | b'\\');
        if k.perm != READ | WRITE {
            return None;
        }
        let (literal, exact) = match k.prefix {
            true => (&k.pattern[..k.pattern.len() - 1], false),
            false if !k.pattern.iter().any(special) => (&k.pattern[..], true),
            false => return None,
        };
        let short = !exact && literal.len() <= 8;
        let (mut word, mut mask) = (0u64, 0u64);
        if short {
            let mut bytes = [0u8; 8];
            bytes[..literal.len()].copy_from_slice(literal);
            word = u64::from_le_bytes(bytes);
            mask = match literal.len() {
                8 => u64::MAX,
                n => (1u64 << (8 * n)) - 1,
            };
        }
        Some(FastKey {
            literal: literal.to_vec(),
            exact,
            word,
            mask,
            short,
        })
    }

    #[inline]
    fn matches(&self, key: &[u8]) -> bool {
        match (self.short, key.first_chunk::<8>()) {
            (true, Some(head)) => (u64::from_le_bytes(*head) ^ self.word) & self.mask == 0,
            _ => self.matches_literal(key),
        }
    }

    #[inline(never)]
    fn matches_literal(&self, key: &[u8]) -> bool {
        match self.exact {
            true => key == self.literal,
            false => key.starts_with(&self.literal),
        }
    }
}

impl User {
    /// A new user: off, no passwords, no commands (ACLCreateUser).
    pub fn new(name: &str, pubsub_all: bool) -> User {
        User {
            name: name.to_string(),
            enabled: false,
            nopass: false,
            sanitize: None,
            passwords: vec![],
            selectors: vec![Selector::new(pubsub_all)],
            free: false,
            fast: FastPath::default(),
        }
    }

    /// Applies one SETUSER rule (Redis's ACLSetUser); a selector in
    /// parentheses arrives as one op.
    pub fn apply(
        &mut self,
        t: &CommandTable,
        op: &[u8],
        pubsub_all: bool,
    ) -> Result<(), RuleError> {
        let r = self.apply_inner(t, op, pubsub_all);
        self.free = self.enabled_free();
        self.fast = FastPath::of(t, &self.selectors);
        r
    }

    fn enabled_free(&self) -> bool {
        self.selectors[0].unrestricted()
    }

    fn apply_inner(
        &mut self,
        t: &CommandTable,
        op: &[u8],
        pubsub_all: bool,
    ) -> Result<(), RuleError> {
        if op.is_empty() {
            return Ok(());
        }
        let lower = op.to_ascii_lowercase();
        match &lower[..] {
            b"on" => self.enabled = true,
            b"off" => self.enabled = false,
            b"skip-sanitize-payload" => self.sanitize = Some(false),
            b"sanitize-payload" => self.sanitize = Some(true),
            b"nopass" => {
                self.nopass = true;
                self.passwords.clear();
            }
            b"resetpass" => {
                self.nopass = false;
                self.passwords.clear();
            }
            b"clearselectors" => self.selectors.truncate(1),
            b"reset" => {
                self.nopass = false;
                self.passwords.clear();
                let root = &mut self.selectors[0];
                root.all_keys = false;
                root.keys.clear();
                root.all_channels = pubsub_all;
                root.channels.clear();
                self.enabled = false;
                self.sanitize = Some(true);
                self.selectors.truncate(1);
                self.selectors[0].set_all(t, false);
            }
            _ => return self.apply_password_or_selector(t, op, pubsub_all),
        }
        Ok(())
    }

    fn apply_password_or_selector(
        &mut self,
        t: &CommandTable,
        op: &[u8],
        pubsub_all: bool,
    ) -> Result<(), RuleError> {
        match op[0] {
            b'>' | b'#' => {
                let hash = password_hash(op)?;
                if !self.passwords.contains(&hash) {
                    self.passwords.push(hash);
                }
                self.nopass = false;
            }
            b'<' | b'!' => {
                let hash = password_hash(op)?;
                let at = self.passwords.iter().position(|p| *p == hash);
                self.passwords.remove(at.ok_or(RuleError::NoSuchPassword)?);
            }
            b'(' if op.last() == Some(&b')') => {
                let mut s = Selector::new(pubsub_all);
                let inner = String::from_utf8_lossy(&op[1..op.len() - 1]).into_owned();
                for rule in inner.split_whitespace() {
                    s.apply(t, rule.as_bytes())?;
                }
                self.selectors.push(s);
            }
            _ => self.selectors[0].apply(t, op)?,
        }
        Ok(())
    }

    /// Checks a command line against every selector: allowed if one
    /// allows it; else the most relevant refusal (a key or channel over
    /// the command, the later argument over the earlier), as Redis.
    pub fn check(&self, t: &CommandTable, id: CommandId, args: Args) -> Result<(), Denied> {
        if self.allows_fast(t.get(id), id, args) {
            return Ok(());
        }
        let mut worst = Denied::Command;
        for s in &self.selectors {
            match s.check(t, id, args) {
                Ok(()) => return Ok(()),
                Err(d) => worst = worst.max(d),
            }
        }
        Err(worst)
    }

    /// Whether some selector allows `args` by the common case's quick test
    /// (dispatch's hot path for a restricted user's GET and SET); false
    /// decides nothing: `check` then gives the answer and its reason.
    #[inline]
    pub fn allows_fast(&self, cmd: &Command, id: CommandId, args: Args) -> bool {
        let f = &self.fast;
        if f.bits
            .get(id / 64)
            .is_none_or(|w| w & (1 << (id % 64)) == 0)
        {
            return false;
        }
        // No keys_fn here unless all keys are allowed (`FastPath::of`).
        f.all_keys || cmd.first_key <= 0 || f.keys_match(cmd, args)
    }

    /// Whether some selector lets `args` run with access to every key
    /// (`~*`, or `%R~*` for `need` READ): SORT's BY and GET patterns
    /// (Redis's ACLUserCheckCmdWithUnrestrictedKeyAccess).
    pub fn all_keys_allowed(&self, t: &CommandTable, id: CommandId, args: Args, need: u8) -> bool {
        self.selectors.iter().any(|s| {
            s.check(t, id, args).is_ok()
                && (s.all_keys
                    || s.keys
                        .iter()
                        .any(|k| k.perm & need == need && k.pattern == b"*"))
        })
    }

    /// Whether a password opens this user (Redis's ACLCheckUserCredentials,
    /// every stored hash compared in constant time).
    pub fn password_ok(&self, pass: &[u8]) -> bool {
        if !self.enabled {
            return false;
        }
        if self.nopass {
            return true;
        }
        let hashed = hash_password(pass);
        let mut ok = false;
        for p in &self.passwords {
            ok |= constant_time_eq(p.as_bytes(), hashed.as_bytes());
        }
        ok
    }

    /// The rules after `user <name> ` in ACL LIST and ACL SAVE.
    pub fn describe(&self, t: &CommandTable) -> String {
        let mut s = String::new();
        s.push_str(if self.enabled { "on " } else { "off " });
        if self.nopass {
            s.push_str("nopass ");
        }
        match self.sanitize {
            Some(false) => s.push_str("skip-sanitize-payload "),
            Some(true) => s.push_str("sanitize-payload "),
            None => {}
        }
        for p in &self.passwords {
            s.push('#');
            s.push_str(p);
            s.push(' ');
        }
        s.push_str(&self.selectors[0].describe(t));
        for sel in &self.selectors[1..] {
            s.push_str(&format!(" ({})", sel.describe(t)));
        }
        s
    }

    /// The flags GETUSER lists, in Redis's order.
    pub fn flags(&self) -> Vec<&'static str> {
        let mut v = vec![if self.enabled { "on" } else { "off" }];
        if self.nopass {
            v.push("nopass");
        }
        match self.sanitize {
            Some(false) => v.push("skip-sanitize-payload"),
            Some(true) => v.push("sanitize-payload"),
            None => {}
        }
        v
    }
}

fn password_hash(op: &[u8]) -> Result<String, RuleError> {
    match op[0] {
        b'>' | b'<' => Ok(hash_password(&op[1..])),
        _ if valid_hash(&op[1..]) => Ok(String::from_utf8_lossy(&op[1..]).into_owned()),
        _ => Err(RuleError::BadHash),
    }
}

/// Joins rules split across arguments back into one selector each
/// (`(~x` `+get)` becomes `(~x +get)`), as Redis's
/// ACLMergeSelectorArguments; an unclosed parenthesis is an error naming
/// the argument where it opened.
pub(crate) fn merge_selectors(args: &[Vec<u8>]) -> Result<Vec<Vec<u8>>, Vec<u8>> {
    let mut out = vec![];
    let mut open: Option<(usize, Vec<u8>)> = None;
    for (i, a) in args.iter().enumerate() {
        if let Some((_, sel)) = open.as_mut() {
            sel.push(b' ');
            sel.extend_from_slice(a);
            if a.last() == Some(&b')') {
                out.push(open.take().unwrap().1);
            }
            continue;
        }
        if a.first() == Some(&b'(') && a.last() != Some(&b')') {
            open = Some((i, a.clone()));
            continue;
        }
        out.push(a.clone());
    }
    match open {
        Some((i, _)) => Err(args[i].clone()),
        None => Ok(out),
    }
}
