/*
 * TLS private keys (issue 26): reading `tls-key-file` and
 * `tls-client-key-file` in every PEM form OpenSSL writes, decrypting with
 * `tls-key-file-pass` / `tls-client-key-file-pass` as Redis's OpenSSL does:
 * - plain keys (PKCS#8 `PRIVATE KEY`, PKCS#1 `RSA PRIVATE KEY`, SEC1
 *   `EC PRIVATE KEY`), the password ignored;
 * - PKCS#8 `ENCRYPTED PRIVATE KEY` (PBES2), what OpenSSL 3 writes;
 * - the legacy form, a PKCS#1 or SEC1 key with `Proc-Type: 4,ENCRYPTED`
 *   and `DEK-Info: <cipher>,<iv hex>` headers (OpenSSL 1.x's `genrsa
 *   -aes256`, OpenSSL 3's `rsa -traditional -aes256`): the key is derived
 *   from the password by OpenSSL's EVP_BytesToKey (MD5, one round, the
 *   IV's first 8 bytes as salt) and the body is CBC with PKCS#7 padding,
 *   in AES-128/192/256, DES-EDE3 or DES.
 *
 * Its own module so that the TLS configuration (`core/tls.rs`) stays about
 * rustls; the errors are the text after Redis's "Failed to load private
 * key: <file>: ".
 */

use base64ct::{Base64, Encoding};
use cbc::cipher::{block_padding::Pkcs7, BlockDecryptMut, KeyIvInit};
use md5::{Digest, Md5};
use rustls::pki_types::PrivateKeyDer;

/// The key in `path`, decrypted with `pass` if it is encrypted; the error
/// is the whole line to log.
pub(crate) fn load_key(path: &str, pass: &str) -> Result<PrivateKeyDer<'static>, String> {
    let fail = |e: String| format!("Failed to load private key: {path}: {e}");
    let text = std::fs::read(path).map_err(|e| fail(e.to_string()))?;
    read_key(&text, pass).map_err(fail)
}

/// The key in PEM `text` (see the module comment).
pub(crate) fn read_key(text: &[u8], pass: &str) -> Result<PrivateKeyDer<'static>, String> {
    if let Some(block) = legacy_block(text) {
        return decrypt_legacy(&block, pass);
    }
    if let Some(k) = rustls_pemfile::private_key(&mut &text[..]).map_err(|e| e.to_string())? {
        return Ok(k);
    }
    decrypt_pkcs8(text, pass)
}

fn need_pass(pass: &str) -> Result<(), String> {
    match pass.is_empty() {
        true => Err("the key is encrypted and no password is set (tls-key-file-pass)".into()),
        false => Ok(()),
    }
}

/// An `ENCRYPTED PRIVATE KEY` (what OpenSSL 3's `openssl rsa -aes256` and
/// `openssl pkcs8 -topk8` write) decrypted with `pass`, or why not.
fn decrypt_pkcs8(pem: &[u8], pass: &str) -> Result<PrivateKeyDer<'static>, String> {
    let (label, der) = pkcs8::der::pem::decode_vec(pem).map_err(|_| "no private key found")?;
    if label != "ENCRYPTED PRIVATE KEY" {
        return Err(format!("no private key found ({label})"));
    }
    need_pass(pass)?;
    let info =
        pkcs8::EncryptedPrivateKeyInfo::try_from(der.as_slice()).map_err(|e| e.to_string())?;
    let key = info
        .decrypt(pass)
        .map_err(|_| "bad decrypt (wrong password?)".to_string())?;
    Ok(PrivateKeyDer::Pkcs8(key.as_bytes().to_vec().into()))
}

/// A legacy encrypted PEM block: its label, `DEK-Info` and base64 body.
struct LegacyBlock {
    label: String,
    dek_info: String,
    body: String,
}

/// The first PEM block of `text` that carries `Proc-Type: 4,ENCRYPTED`.
fn legacy_block(text: &[u8]) -> Option<LegacyBlock> {
    let text = std::str::from_utf8(text).ok()?;
    let mut lines = text.lines().map(str::trim);
    while let Some(line) = lines.next() {
        let Some(label) = line
            .strip_prefix("-----BEGIN ")
            .and_then(|l| l.strip_suffix("-----"))
        else {
            continue;
        };
        let (mut encrypted, mut dek_info, mut body) = (false, String::new(), String::new());
        for l in lines.by_ref() {
            if l.starts_with("-----END ") {
                break;
            }
            match l.split_once(':') {
                Some(("Proc-Type", v)) => encrypted = v.trim() == "4,ENCRYPTED",
                Some(("DEK-Info", v)) => dek_info = v.trim().to_string(),
                Some(_) => {}
                None => body.push_str(l),
            }
        }
        if encrypted {
            let label = label.to_string();
            return Some(LegacyBlock {
                label,
                dek_info,
                body,
            });
        }
    }
    None
}

/// The legacy block's key, decrypted (see the module comment).
fn decrypt_legacy(b: &LegacyBlock, pass: &str) -> Result<PrivateKeyDer<'static>, String> {
    need_pass(pass)?;
    let (cipher, iv_hex) = b
        .dek_info
        .split_once(',')
        .ok_or("the key is encrypted but has no valid DEK-Info header")?;
    let iv = hex(iv_hex).ok_or("bad IV in the DEK-Info header")?;
    let mut data = Base64::decode_vec(&b.body).map_err(|e| format!("bad base64: {e}"))?;
    let cipher = cipher.to_ascii_uppercase();
    let key_len = match cipher.as_str() {
        "AES-128-CBC" => 16,
        "AES-192-CBC" => 24,
        "AES-256-CBC" => 32,
        "DES-EDE3-CBC" => 24,
        "DES-CBC" => 8,
        _ => return Err(format!("unsupported cipher {cipher} (DEK-Info)")),
    };
    let block = if cipher.starts_with("AES") { 16 } else { 8 };
    if iv.len() != block {
        return Err("bad IV in the DEK-Info header".into());
    }
    let key = bytes_to_key(pass.as_bytes(), &iv[..8], key_len);
    let plain = cbc_decrypt(&cipher, &key, &iv, &mut data)
        .ok_or("bad decrypt (wrong password?)")?
        .to_vec();
    // A wrong password can leave valid padding by chance: the body must
    // at least be a DER SEQUENCE.
    if plain.first() != Some(&0x30) {
        return Err("bad decrypt (wrong password?)".into());
    }
    match b.label.as_str() {
        "RSA PRIVATE KEY" => Ok(PrivateKeyDer::Pkcs1(plain.into())),
        "EC PRIVATE KEY" => Ok(PrivateKeyDer::Sec1(plain.into())),
        "PRIVATE KEY" => Ok(PrivateKeyDer::Pkcs8(plain.into())),
        l => Err(format!("unsupported key type ({l})")),
    }
}

/// `data` decrypted in place by the named CBC cipher; None when the
/// padding is wrong (a wrong password, almost always).
fn cbc_decrypt<'a>(cipher: &str, key: &[u8], iv: &[u8], data: &'a mut [u8]) -> Option<&'a [u8]> {
    fn run<C: BlockDecryptMut + KeyIvInit>(k: &[u8], iv: &[u8], d: &mut [u8]) -> Option<usize> {
        let c = C::new_from_slices(k, iv).ok()?;
        c.decrypt_padded_mut::<Pkcs7>(d).ok().map(|p| p.len())
    }
    let n = match cipher {
        "AES-128-CBC" => run::<cbc::Decryptor<aes::Aes128>>(key, iv, data),
        "AES-192-CBC" => run::<cbc::Decryptor<aes::Aes192>>(key, iv, data),
        "AES-256-CBC" => run::<cbc::Decryptor<aes::Aes256>>(key, iv, data),
        "DES-EDE3-CBC" => run::<cbc::Decryptor<des::TdesEde3>>(key, iv, data),
        _ => run::<cbc::Decryptor<des::Des>>(key, iv, data),
    }?;
    Some(&data[..n])
}

/// OpenSSL's EVP_BytesToKey with MD5 and one round: D_1 = MD5(pass ||
/// salt), D_i = MD5(D_{i-1} || pass || salt), the key their first `len`
/// bytes.
fn bytes_to_key(pass: &[u8], salt: &[u8], len: usize) -> Vec<u8> {
    let mut key = Vec::with_capacity(len + 16);
    let mut prev: Vec<u8> = vec![];
    while key.len() < len {
        let mut h = Md5::new();
        h.update(&prev);
        h.update(pass);
        h.update(salt);
        prev = h.finalize().to_vec();
        key.extend_from_slice(&prev);
    }
    key.truncate(len);
    key
}

fn hex(s: &str) -> Option<Vec<u8>> {
    if !s.len().is_multiple_of(2) {
        return None;
    }
    (0..s.len())
        .step_by(2)
        .map(|i| u8::from_str_radix(s.get(i..i + 2)?, 16).ok())
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn bytes_to_key_is_openssls() {
        // `openssl enc -aes-256-cbc -md md5 -k secret -S 0102030405060708 -P`
        let k = bytes_to_key(b"secret", &[1, 2, 3, 4, 5, 6, 7, 8], 32);
        assert_eq!(k.len(), 32);
        let hex: String = k.iter().map(|b| format!("{b:02X}")).collect();
        assert_eq!(
            hex,
            "C9E5A1BD216DBE1317E230CEF48F38EE7F0E17AD64022144BCCEC4A1AA2879AB"
        );
    }
}
