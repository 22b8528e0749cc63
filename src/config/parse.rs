//! redis.conf syntax: lines of `directive arg arg ...`, `#` comments, quoted
//! arguments, `include`, and the command-line form `--directive value`.

/// Parses "1gb", "10mb", "5k", "100" (Redis's memtoull: k=1000, kb=1024 ...).
pub fn parse_memory(s: &str) -> Result<i64, ()> {
    let l = s.to_ascii_lowercase();
    let (num, mul): (&str, i64) = if let Some(n) = l.strip_suffix("gb") {
        (n, 1 << 30)
    } else if let Some(n) = l.strip_suffix("mb") {
        (n, 1 << 20)
    } else if let Some(n) = l.strip_suffix("kb") {
        (n, 1 << 10)
    } else if let Some(n) = l.strip_suffix('g') {
        (n, 1_000_000_000)
    } else if let Some(n) = l.strip_suffix('m') {
        (n, 1_000_000)
    } else if let Some(n) = l.strip_suffix('k') {
        (n, 1_000)
    } else if let Some(n) = l.strip_suffix('b') {
        (n, 1)
    } else {
        (l.as_str(), 1)
    };
    let v: i64 = num.parse().map_err(|_| ())?;
    v.checked_mul(mul).ok_or(())
}

/// Splits one config line into words (sdssplitargs rules).
pub fn split_line(line: &str) -> Result<Vec<String>, ()> {
    let mut out = Vec::new();
    let mut p = crate::protocol::RequestParser::new();
    let mut tmp = line.as_bytes().to_vec();
    tmp.extend_from_slice(b"\n");
    match p.parse(&tmp, &Default::default()) {
        Ok(crate::protocol::Parsed::Command { .. }) => {
            for a in p.args(&tmp).iter() {
                out.push(String::from_utf8_lossy(a).into_owned());
            }
            Ok(out)
        }
        _ => Err(()),
    }
}

/// Builds the configuration from the command line: an optional config file
/// (or `-` for stdin) followed by `--directive value...` pairs.
pub fn load_from_args(args: &[String]) -> Result<super::Config, String> {
    let mut cfg = super::Config::default();
    let mut i = 0;
    if let Some(first) = args.first() {
        if first == "-v" || first == "--version" {
            println!(
                "LatticeDB server v={} (redis {})",
                crate::LATTICE_VERSION,
                crate::REDIS_VERSION
            );
            std::process::exit(0);
        }
        if !first.starts_with("--") {
            let text = if first == "-" {
                let mut s = String::new();
                std::io::Read::read_to_string(&mut std::io::stdin(), &mut s)
                    .map_err(|e| e.to_string())?;
                s
            } else {
                std::fs::read_to_string(first)
                    .map_err(|e| format!("Fatal error, can't open config file '{first}': {e}"))?
            };
            load_text(&mut cfg, &text, first)?;
            if first != "-" {
                cfg.file = Some(std::path::PathBuf::from(first));
            }
            i = 1;
        }
    }
    let mut text = String::new();
    while i < args.len() {
        let a = &args[i];
        if let Some(name) = a.strip_prefix("--") {
            text.push('\n');
            text.push_str(name);
        } else {
            text.push(' ');
            text.push_str(&quote(a));
        }
        i += 1;
    }
    load_text(&mut cfg, &text, "(command line)")?;
    Ok(cfg)
}

fn quote(s: &str) -> String {
    format!("\"{}\"", s.replace('\\', "\\\\").replace('"', "\\\""))
}

/// Applies every line of a config text.
pub fn load_text(cfg: &mut super::Config, text: &str, file: &str) -> Result<(), String> {
    for (n, raw) in text.lines().enumerate() {
        let line = raw.trim();
        if line.is_empty() || line.starts_with('#') {
            continue;
        }
        let fail = |reason: &str| {
            format!("\n*** FATAL CONFIG FILE ERROR (Redis 7.2.4) ***\nReading the configuration file, at line {}\n>>> '{}'\n{}", n + 1, line, reason)
        };
        let words =
            split_line(line).map_err(|_| fail("Unbalanced quotes in configuration line"))?;
        if words.is_empty() {
            continue;
        }
        let _ = file;
        cfg.set(&words[0], &words[1..]).map_err(|e| fail(&e))?;
    }
    Ok(())
}
