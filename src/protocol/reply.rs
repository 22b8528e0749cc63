//! Reply encoder: writes RESP2 or RESP3 into a connection's output buffer.
//!
//! Commands never build reply values; they call these methods, which append
//! the encoded bytes directly. The two protocols differ only in a few types
//! (null, map, set, double, boolean, verbatim, push), and each method picks
//! the right form for the client's protocol version.

/// Output buffer of one connection plus its protocol version (2 or 3).
pub struct ReplyBuf {
    pub buf: Vec<u8>,
    pub resp: u8,
}

impl Default for ReplyBuf {
    fn default() -> Self {
        ReplyBuf {
            buf: Vec::with_capacity(16 * 1024),
            resp: 2,
        }
    }
}

impl ReplyBuf {
    pub fn new(resp: u8) -> Self {
        ReplyBuf {
            buf: Vec::new(),
            resp,
        }
    }

    #[inline]
    pub fn len(&self) -> usize {
        self.buf.len()
    }
    #[inline]
    pub fn is_empty(&self) -> bool {
        self.buf.is_empty()
    }

    #[inline]
    fn prefixed_len(&mut self, prefix: u8, n: i64) {
        self.buf.push(prefix);
        let mut b = itoa_buf();
        self.buf.extend_from_slice(fmt_i64(&mut b, n));
        self.buf.extend_from_slice(b"\r\n");
    }

    /// `+OK`
    pub fn ok(&mut self) {
        self.buf.extend_from_slice(b"+OK\r\n");
    }
    pub fn simple(&mut self, s: &str) {
        self.buf.push(b'+');
        self.buf.extend_from_slice(s.as_bytes());
        self.buf.extend_from_slice(b"\r\n");
    }
    /// An error line; `msg` is the full text after '-', e.g. "ERR syntax error".
    pub fn error(&mut self, msg: &str) {
        self.buf.push(b'-');
        // Newlines would break the protocol: Redis replaces them by spaces.
        for &c in msg.as_bytes() {
            self.buf
                .push(if c == b'\r' || c == b'\n' { b' ' } else { c });
        }
        self.buf.extend_from_slice(b"\r\n");
    }
    #[inline]
    pub fn int(&mut self, n: i64) {
        self.prefixed_len(b':', n);
    }
    #[inline]
    pub fn bulk(&mut self, s: &[u8]) {
        self.prefixed_len(b'$', s.len() as i64);
        self.buf.extend_from_slice(s);
        self.buf.extend_from_slice(b"\r\n");
    }
    pub fn bulk_str(&mut self, s: &str) {
        self.bulk(s.as_bytes());
    }
    /// An integer sent as a bulk string.
    pub fn bulk_int(&mut self, n: i64) {
        let mut b = itoa_buf();
        let s = fmt_i64(&mut b, n);
        let s = s.to_vec();
        self.bulk(&s);
    }
    /// Null bulk: `$-1` in RESP2, `_` in RESP3.
    #[inline]
    pub fn null(&mut self) {
        if self.resp >= 3 {
            self.buf.extend_from_slice(b"_\r\n");
        } else {
            self.buf.extend_from_slice(b"$-1\r\n");
        }
    }
    /// Null array: `*-1` in RESP2, `_` in RESP3.
    pub fn null_array(&mut self) {
        if self.resp >= 3 {
            self.buf.extend_from_slice(b"_\r\n");
        } else {
            self.buf.extend_from_slice(b"*-1\r\n");
        }
    }
    #[inline]
    pub fn array(&mut self, n: usize) {
        self.prefixed_len(b'*', n as i64);
    }
    /// A map of `n` pairs: `%n` in RESP3, a flat array of 2n in RESP2.
    pub fn map(&mut self, n: usize) {
        if self.resp >= 3 {
            self.prefixed_len(b'%', n as i64);
        } else {
            self.prefixed_len(b'*', 2 * n as i64);
        }
    }
    /// A set: `~n` in RESP3, an array in RESP2.
    pub fn set(&mut self, n: usize) {
        if self.resp >= 3 {
            self.prefixed_len(b'~', n as i64);
        } else {
            self.prefixed_len(b'*', n as i64);
        }
    }
    /// Out-of-band push: `>n` in RESP3, an array in RESP2.
    pub fn push(&mut self, n: usize) {
        if self.resp >= 3 {
            self.prefixed_len(b'>', n as i64);
        } else {
            self.prefixed_len(b'*', n as i64);
        }
    }
    /// A double: `,` in RESP3, a bulk string in RESP2 (Redis's %.17g form).
    pub fn double(&mut self, d: f64) {
        let s = format_double(d);
        if self.resp >= 3 {
            self.buf.push(b',');
            self.buf.extend_from_slice(s.as_bytes());
            self.buf.extend_from_slice(b"\r\n");
        } else {
            self.bulk(s.as_bytes());
        }
    }
    /// A boolean: `#t`/`#f` in RESP3, `:1`/`:0` in RESP2.
    pub fn boolean(&mut self, b: bool) {
        if self.resp >= 3 {
            self.buf
                .extend_from_slice(if b { b"#t\r\n" } else { b"#f\r\n" });
        } else {
            self.int(b as i64);
        }
    }
    /// Verbatim text (`=len\r\ntxt:...`) in RESP3, a bulk string in RESP2.
    pub fn verbatim(&mut self, s: &[u8]) {
        if self.resp >= 3 {
            self.prefixed_len(b'=', s.len() as i64 + 4);
            self.buf.extend_from_slice(b"txt:");
            self.buf.extend_from_slice(s);
            self.buf.extend_from_slice(b"\r\n");
        } else {
            self.bulk(s);
        }
    }
    /// A big number: `(` in RESP3, a bulk string in RESP2.
    pub fn bignum(&mut self, digits: &str) {
        if self.resp >= 3 {
            self.buf.push(b'(');
            self.buf.extend_from_slice(digits.as_bytes());
            self.buf.extend_from_slice(b"\r\n");
        } else {
            self.bulk(digits.as_bytes());
        }
    }
    /// Bytes already encoded as RESP.
    pub fn raw(&mut self, s: &[u8]) {
        self.buf.extend_from_slice(s);
    }
}

/// Format a double as Redis does for replies (`%.17g`, with "inf"/"-inf"/"nan").
pub(crate) fn format_double(d: f64) -> String {
    if d.is_nan() {
        return "nan".into();
    }
    if d.is_infinite() {
        return if d > 0.0 { "inf".into() } else { "-inf".into() };
    }
    // Fast path for whole numbers (most scores): %.17g prints one below
    // 1e17 as a plain integer. -0.0 is left to format_g ("-0").
    if d.fract() == 0.0 && d.abs() < 1e17 && d != 0.0 {
        let mut b = [0u8; 20];
        let digits = fmt_i64(&mut b, d as i64);
        return String::from_utf8_lossy(digits).into_owned();
    }
    format_g(d, 17)
}

/// C's `%.{prec}g`.
pub(crate) fn format_g(d: f64, prec: usize) -> String {
    if d == 0.0 {
        return if d.is_sign_negative() {
            "-0".into()
        } else {
            "0".into()
        };
    }
    let prec = prec.max(1);
    // Round to `prec` significant digits once (exponential form), then
    // lay the digits out in the style printf picks from the exponent.
    let e_repr = format!("{:.*e}", prec - 1, d);
    let (mantissa, e) = e_repr.split_once('e').unwrap_or((&e_repr, "0"));
    let e: i32 = e.parse().unwrap_or(0);
    if e < -4 || e >= prec as i32 {
        let m = trim_zeros(mantissa);
        let sign = if e < 0 { '-' } else { '+' };
        return format!("{m}e{sign}{:02}", e.abs());
    }
    let neg = mantissa.starts_with('-');
    let digits: String = mantissa.chars().filter(char::is_ascii_digit).collect();
    let mut out = String::with_capacity(digits.len() + 8);
    if neg {
        out.push('-');
    }
    if e >= 0 {
        let (int, frac) = digits.split_at((e as usize + 1).min(digits.len()));
        out.push_str(int);
        out.push('.');
        out.push_str(frac);
    } else {
        out.push_str("0.");
        (0..(-e - 1)).for_each(|_| out.push('0'));
        out.push_str(&digits);
    }
    trim_zeros(&out).to_string()
}

fn trim_zeros(s: &str) -> &str {
    if s.contains('.') {
        s.trim_end_matches('0').trim_end_matches('.')
    } else {
        s
    }
}

#[inline]
fn itoa_buf() -> [u8; 20] {
    [0u8; 20]
}

/// Formats `n` into the tail of `b` and returns the digits.
#[inline]
pub(crate) fn fmt_i64(b: &mut [u8; 20], n: i64) -> &[u8] {
    let neg = n < 0;
    let mut v = n.unsigned_abs();
    let mut i = b.len();
    loop {
        i -= 1;
        b[i] = b'0' + (v % 10) as u8;
        v /= 10;
        if v == 0 {
            break;
        }
    }
    if neg {
        i -= 1;
        b[i] = b'-';
    }
    &b[i..]
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn resp2_and_resp3_shapes() {
        let mut r = ReplyBuf::new(2);
        r.null();
        r.map(1);
        r.double(1.5);
        r.int(-42);
        assert_eq!(r.buf, b"$-1\r\n*2\r\n$3\r\n1.5\r\n:-42\r\n");
        let mut r = ReplyBuf::new(3);
        r.null();
        r.map(1);
        r.double(1.5);
        r.boolean(true);
        assert_eq!(r.buf, b"_\r\n%1\r\n,1.5\r\n#t\r\n");
    }

    #[test]
    fn printf_g() {
        assert_eq!(format_double(3.0), "3");
        assert_eq!(format_double(0.1), "0.10000000000000001");
        assert_eq!(format_double(1e20), "1e+20");
        assert_eq!(format_double(1.5e-5), "1.5e-05");
        assert_eq!(format_g(10.5, 17), "10.5");
        assert_eq!(format_double(f64::INFINITY), "inf");
        assert_eq!(format_g(123456789.0, 17), "123456789");
        // The whole-number fast path agrees with the general one.
        for d in [
            1.0,
            -7.0,
            99999999999999990.0,
            -12345678901234567.0,
            4503599627370497.0,
        ] {
            assert_eq!(format_double(d), format_g(d, 17), "{d}");
        }
        assert_eq!(format_double(1e17), "1e+17");
        assert_eq!(format_double(-0.0), "-0");
    }
}

#[cfg(test)]
mod printf_cases {
    //! Expected strings from C's printf("%.17g") (via Python's %-formatting).
    const CASES: &[(u64, &str)] = &[
        (0xc1158139e19f26a6, "-352334.47033367527"),
        (0xc1254f7b4de6bc41, "-698301.65215099615"),
        (0x41126cb3c8c91e6c, "301868.94607970747"),
        (0xc12a18aeda73d2dc, "-855127.42666491447"),
        (0x40f185402347c830, "71764.008613378508"),
        (0xc1106538aa29bbfe, "-268622.16617482889"),
        (0xc12afa444d07dbf8, "-884002.15045058634"),
        (0x40cd0bbbb24d45c0, "14871.466378840501"),
        (0xc12c3aa15dc16262, "-925008.68311603018"),
        (0xc10033250fb807b4, "-132708.63267522829"),
        (0xc12a41024e427481, "-860289.15285076213"),
        (0xc128fb1bf255fc60, "-818573.9733122699"),
        (0xc1026d8cf945b304, "-150961.62171497208"),
        (0x4123f3107faa06d8, "653704.24934407603"),
        (0xc126f61827c86326, "-752396.07770070876"),
        (0xc120e464243e0f0c, "-553522.07078597089"),
        (0x410f1c938ef929c8, "254866.4448111786"),
        (0x412b5373c5137304, "895417.88491401123"),
        (0x4102d2ef2d898ad0, "154205.89723499725"),
        (0xc109397867d49564, "-206639.05069843971"),
        (0x412d117c6c208cea, "952510.21118584019"),
        (0xc12baca5470c238f, "-906834.63876448746"),
        (0x4125e111d610db68, "716936.91809735913"),
        (0xc119aeb5b597bcf6, "-420781.42733664752"),
        (0xc125b683aaa45910, "-711489.83328512497"),
        (0xc12753ff0c352f28, "-764415.52384326328"),
        (0xc11760f1683d3eba, "-383036.35179613123"),
        (0x41234b796fbd2958, "632252.71824006271"),
        (0xc1237ca67af53826, "-638547.24015212501"),
        (0x4103ec029e5c88c0, "163200.32732493244"),
        (0x4110f50bc05c5f08, "277826.93785236822"),
        (0xc10f272750fed2dc, "-255204.91454853758"),
        (0x40f7500ee717bb10, "95488.931419115746"),
        (0xc12aaf6c19a097da, "-874422.05005335365"),
        (0xc12ae13b51f45f35, "-880797.66006753466"),
        (0xc121f2652612b0c2, "-588082.57436134689"),
        (0x4116057fc913883c, "360799.9463635718"),
        (0xc101ad7b1bfa6674, "-144815.38866119424"),
        (0xc116afe6a3117e24, "-371705.659246417"),
        (0x4104e39dd0ed62c0, "171123.72701527737"),
        (0xc0f6dbf3f4c54698, "-93631.247258449323"),
        (0xc1187148066c556e, "-400466.00627263531"),
        (0x4121f7aded143b60, "588758.9630449824"),
        (0x41184a93784735a0, "397988.86745914258"),
        (0xc11f3cfbea0a8100, "-511806.97855569422"),
        (0x41022b7b5d383238, "148847.42051734193"),
        (0x40e89b203e7262e0, "50393.00762290298"),
        (0x4126e585fb7799d8, "750274.99114685785"),
        (0x411c022a50c58230, "458890.57887843531"),
        (0xc119e2f1e18140fe, "-424124.47021962691"),
        (0x412d4ebb63d5186e, "960349.6949851641"),
        (0xc1274fb8e3112197, "-763868.44349007576"),
        (0xc103fd52d9f7bbcc, "-163754.35642954556"),
        (0x411f63a76fbfe7cc, "514281.85913049872"),
        (0xc1253dbddc81f4e6, "-696030.93067899044"),
        (0xc0d58e73239bda80, "-22073.799048388842"),
        (0xc12c1fe2f8c88e77, "-921585.48590512469"),
        (0x411488beda2eb478, "336431.71306879027"),
        (0x412025eb77007dde, "529141.73242562613"),
        (0x4101d41f0b604c58, "146051.88055476802"),
        (0x4126ead73f5098ac, "750955.62366177654"),
        (0xc116bc63e5afe5a4, "-372504.97430380643"),
        (0x4117d6faee20e260, "390590.73254731856"),
        (0x41070a1e089f4598, "188739.75421003695"),
        (0x4103817344bdb7f0, "159790.40856498433"),
        (0xc0f5625565fa9438, "-87589.337397173862"),
        (0x4124bfff1f3eadfe, "679935.56102508283"),
        (0x412b24246163f9a4, "889362.19021587493"),
        (0xc0e94b6a67b76f80, "-51803.325160711072"),
        (0x411409c1a4cfe7f8, "328304.41094934894"),
        (0xc12ad08a4a23f456, "-878661.14480556059"),
        (0x411898a02ba1a760, "402984.04260884784"),
        (0x4111f5c6d6129a38, "294257.70905533759"),
        (0x412e189fc2038a94, "986191.87893326813"),
        (0x4123a613257d0460, "643849.5732194297"),
        (0xc11a4b63be456c36, "-430808.93581170158"),
        (0xc10be208ebbcff6c, "-228417.11510657833"),
        (0x41149665ba217d40, "337305.43176837638"),
        (0xc12d23f449abcbb9, "-954874.14388882287"),
        (0xc0f2b416d6a1df98, "-76609.427400468267"),
        (0xc12442be7bffec3c, "-663903.24218691094"),
        (0xc1275ee0d2736181, "-765808.41103653621"),
        (0xc12aeb56529ad01e, "-882091.16133737913"),
        (0x41205f23f43223f6, "536465.97694504145"),
        (0xc1269f8f1ca72250, "-741319.55596263148"),
        (0xc11ecf095496b653, "-504770.33260617143"),
        (0xc10a9fa4bff75f90, "-218100.59373354586"),
        (0x4126ab77e5815d58, "742843.94825259876"),
        (0xc129996acb9230dc, "-838837.39759972272"),
        (0xc0f8cf932b6c4f08, "-101625.19810133812"),
        (0x40f823fd17b53c80, "98879.818288074806"),
        (0x4127665f4e46af10, "766767.65288302489"),
        (0x41237cbf59f19cd2, "638559.67567148269"),
        (0x41263741e0f8a5c6, "727968.93939703028"),
        (0xc11b0c577be0234e, "-443157.87097220577"),
        (0xc104adf7b98039d8, "-169406.96557660284"),
        (0xc1113d66ad669cf4, "-282457.6693367504"),
        (0x412773034f0d0ca6, "768385.65439643408"),
        (0x412bf00cd0dbefc0, "915462.40792798251"),
        (0xc1254e5c60784ba8, "-698158.18841778208"),
        (0xbea5ba897d5479ea, "-6.4756454301925938e-07"),
        (0x3badf16569c68067, "3.1703335394466037e-21"),
        (0xc3255e86de8ede49, "-3007453931728676.5"),
        (0xbf7a05c0b5a12540, "-0.0063531425203760539"),
        (0xc12e4489962239ce, "-991812.79322987213"),
        (0x43a333abe0ad76d5, "6.9181924600207219e+17"),
        (0x3d42ac6393437cc3, "1.3268244741278389e-13"),
        (0x42562d274417fd2b, "380987314271.95575"),
        (0x3c64c34e64b92dd9, "9.0044789936531699e-18"),
        (0xc2d3b755c4b882a0, "-86712555594250.5"),
        (0xc0d5050dfde6109c, "-21524.218621746273"),
        (0xc1df8e00701f88ab, "-2117599680.4927166"),
        (0x3c48c5a53b8d2c5f, "2.6857913137141811e-18"),
        (0xbe709c3aea43e595, "-6.1878092486638424e-08"),
        (0xbd0abd418b35bdc4, "-1.1874626335049899e-14"),
        (0xbc4d8140b218fd48, "-3.198926955353132e-18"),
        (0xc33c40ac48a92506, "-7952408045495558"),
        (0xbcff69487e772f94, "-6.9747013544114412e-15"),
        (0x43df26ee96206b22, "8.978975171388672e+18"),
        (0xbe79797755ffe57c, "-9.4899822666770862e-08"),
        (0x3d841135e3eabfa5, "2.2813797557695747e-12"),
        (0x403ae1c53a4e7319, "26.88191570678018"),
        (0x41de7b4868cf5edf, "2045583779.2401655"),
        (0xc23190122b378f9f, "-75431553847.56102"),
        (0x41cd642681b46822, "986205443.40942788"),
        (0xbf700f71ce74909a, "-0.0039209790768703016"),
        (0xbd02a66cbf16e98f, "-8.282306768876689e-15"),
        (0x3f0a2e221de2ddc3, "4.9934784088486176e-05"),
        (0xbd92cde90d7dd960, "-4.275611298001758e-12"),
        (0x3e2c0fff567a0a52, "3.2669037924643039e-09"),
        (0x42a068216511ac15, "9019711457494.041"),
        (0xc2b925a71d4735e4, "-27649508198197.891"),
        (0x429e2210fb424f91, "8282915655827.8916"),
        (0xbcbd192cf52c6cbc, "-4.0382061930744009e-16"),
        (0x3f04929e0be6910a, "3.9239357181560379e-05"),
        (0x3d902e9a9c3b1d21, "3.6793714265522136e-12"),
        (0xbe935e3de9e8215b, "-2.8860766035410898e-07"),
        (0x422e5aa212d3841b, "65184794985.758018"),
        (0xbe96dcaa8c6a5fd0, "-3.4067000990447525e-07"),
        (0x3e2373d474867e7a, "2.2645644562708191e-09"),
        (0x40ede3f6f1501621, "61215.716957133503"),
        (0x3ea018fcb34b8a0f, "4.7974604075142821e-07"),
        (0xc22bf28346f1f0ad, "-60016403320.97007"),
        (0xbbe10d5ab1349c46, "-2.8887491329008361e-20"),
        (0x3f500b17b24a59a3, "0.00097920717340614009"),
        (0xbe031394711db9e5, "-5.551987500228939e-10"),
        (0x4043408fcc1071e2, "38.504388340024676"),
        (0xc0251be2c3925bcc, "-10.554464446655309"),
        (0x408c700295fd07ab, "910.00126264266635"),
        (0xbd02e410ef86852a, "-8.3892374902274723e-15"),
        (0xbe3776b94a8b478f, "-5.4630834653854411e-09"),
        (0xc1e82dd2ec67572d, "-3245250403.2293916"),
        (0x43c137b94fb66f96, "2.4813279487563643e+18"),
        (0x41f95d4ad9195f6c, "6808710545.5857964"),
        (0x405475bfee94c3cd, "81.839839597013636"),
        (0x3cc5977393d5b3a3, "5.9928748969932042e-16"),
        (0x3d32d6cc2eb21aa6, "6.6929761559643811e-14"),
        (0x3e41998c1a3cbd35, "8.1955427510344589e-09"),
        (0xbdc8273b9279ee25, "-4.3934510811999505e-11"),
        (0xc3e6eca1d692e92c, "-1.3214984850383659e+19"),
        (0xc0e05b11ebbde81e, "-33496.560027078012"),
        (0xbc953c8b7150dfae, "-7.3678919652300897e-17"),
        (0x3dc8b785194e7bdd, "4.4959733126843048e-11"),
        (0x3bfd1bb407e66f86, "9.8622471283433377e-20"),
        (0xc1c4cb04939e56af, "-697698599.23702037"),
        (0x3d9af5cfa1a68e7c, "6.1300396406439227e-12"),
        (0x4388c635beb2a404, "2.2314667443201651e+17"),
        (0x405803ea83f6f898, "96.061188689406094"),
        (0xc3038f221a2ca0e3, "-688175148536860.38"),
        (0xbbc16d21a96f0f89, "-7.3803229598109912e-21"),
        (0x3cfaf6b3e5e78f82, "5.987140233947361e-15"),
        (0x3d2ded771799c352, "5.3162094198111018e-14"),
        (0xbe16be2efad25913, "-1.3238112648502875e-09"),
        (0x3e7182a4c61ba55d, "6.5231050363044217e-08"),
        (0xbe7957347046ee01, "-9.4401254874713992e-08"),
        (0xbed15e01dd170374, "-4.1406669465956219e-06"),
        (0x3fe0e0212cb105f8, "0.52735956887062141"),
        (0xc11d5fd9a3495f3f, "-481270.40945957968"),
        (0x3c5ed2f4ccc6cd26, "6.6838999287893877e-18"),
        (0x40548037e3dfe012, "82.003411263111303"),
        (0x4371a95efb781f8f, "79540800240875760"),
        (0x4296ec3550fea63d, "6300940648361.5596"),
        (0xc2427aec798aef51, "-158743458581.86966"),
        (0xbda03d3c7289848a, "-7.3847348195575233e-12"),
        (0x3bb6338b2c9c70c5, "4.7013171174332682e-21"),
        (0x3e099e7727c0b0e4, "7.4561119735427051e-10"),
        (0x3d8318ddc6d7249f, "2.1710927790302745e-12"),
        (0xc1f8697d91bbb244, "-6553065755.7310219"),
        (0x3d1ad1b80ffd9ea2, "2.3820247836698982e-14"),
        (0x3fbcea5f83f3cc70, "0.1129512498044265"),
        (0x428a885f65719972, "3646627294771.1807"),
        (0x3cd3f99c4227228c, "1.1088374976049376e-15"),
        (0x3c61ac5affc9bbb5, "7.6645562887633047e-18"),
        (0xbf407b90aa76fe75, "-0.00050301135791382004"),
        (0xbd049e165f450fa6, "-9.1560221057741199e-15"),
        (0x42ac1036f65b024b, "15427983584641.146"),
        (0xbc9b3778bc266d4f, "-9.4426848351965637e-17"),
        (0xc3af80e36a11fb3e, "-1.1350321284512233e+18"),
        (0x43aa46da904fe9eb, "9.4672050335337408e+17"),
        (0x3ef981240b4ff646, "2.4322944870638798e-05"),
        (0xc2a15624d9821421, "-9530841547018.0645"),
        (0x4261e40d8690a9de, "614724285573.30835"),
        (0x42a00fccb709e407, "8830022550770.0137"),
        (0x3f13bdc61063f14a, "7.5307096356118684e-05"),
        (0x3e42288fc429a72d, "8.4556842684021291e-09"),
        (0x3d67ece43f51db5f, "6.7999956678641154e-13"),
        (0xc0d04825ad51dce1, "-16672.588703599646"),
        (0xbc6ab17d70778756, "-1.1576382344991275e-17"),
        (0x414a1dc278802e6f, "3423108.9414117853"),
        (0xbfb5db310509edd7, "-0.085375846605465142"),
        (0x3d98f9abb35e3d9b, "5.6787203434631039e-12"),
        (0x408b781314d83d60, "879.00931710183431"),
        (0xbd691f84c37884fa, "-7.1404200415152559e-13"),
        (0x3eaf605bb33fb3bf, "9.3508956533276769e-07"),
        (0x3cf6381a0e1c9623, "4.933641843870897e-15"),
        (0xc212f37d82822eb7, "-20348625056.54562"),
        (0xbea6a122857bc62a, "-6.7440965786767836e-07"),
        (0xc159d3fdb35a3bc8, "-6770678.802382417"),
        (0x40f81fe85c272205, "98814.522498257531"),
        (0xbe2ba3bf2e56efcc, "-3.2176771132236028e-09"),
        (0xbcb4a9fafd3adfca, "-2.8677041353992274e-16"),
        (0x3bea3a18d5bb2bad, "4.4430167028237145e-20"),
        (0xc1b35077b42a0cd1, "-324040628.16425806"),
        (0xbbcc1e2c7eada70f, "-1.1908379639459587e-20"),
        (0xc280d4803f2bdd5c, "-2313108841851.6699"),
        (0x424cdaa11463dd2d, "247854147783.72794"),
        (0x3d39f076a3ec3c7b, "9.2154942548708305e-14"),
        (0x3eb046d555b0d500, "9.7016648826819861e-07"),
        (0x3d053e48bda29c90, "9.4339191729414827e-15"),
        (0xbf4b424b4168934c, "-0.00083187746605926363"),
        (0xbe0fa3a674d2b26d, "-9.2082362017186479e-10"),
        (0xbd60274685c4f26f, "-4.5910780495738176e-13"),
        (0x3f10c3fa53de3ad1, "6.3955453667423391e-05"),
        (0xc2b11ba542f0ee4f, "-18810434416878.309"),
        (0x433dc8af714bd222, "8383430170235426"),
        (0xbf8611ae9962e280, "-0.010775913291909633"),
        (0xbc62eec6579766a7, "-8.210755843063846e-18"),
        (0x3e0496666442321d, "5.9917510581322866e-10"),
        (0xbc713880f8890884, "-1.4936591840855474e-17"),
        (0xbbeb47dc69757ab3, "-4.6215315255001617e-20"),
        (0x3efc31aa814c3639, "2.688790125931191e-05"),
        (0xbeabef3fbaef62da, "-8.3251494753096385e-07"),
        (0xbd3865a0a325e163, "-8.6675493025107714e-14"),
        (0xbfed95bf0f1387fc, "-0.92452958054150214"),
        (0x412e2b878fd1d40e, "988611.78089773818"),
        (0x3f4bf6529f0d19d7, "0.00085333856814245434"),
        (0x3c11f5d3960e5545, "2.4340690864957562e-19"),
        (0x3ea20ff76298999a, "5.3830053054343412e-07"),
        (0x3dd81612f8d11025, "8.7625183328168777e-11"),
        (0xbe005cc8465630f3, "-4.7620941623479561e-10"),
        (0xbfae89f7674469d7, "-0.059646350246299988"),
        (0x4282b95f3486cabd, "2573421940953.3423"),
        (0x3f754212a5f2b84a, "0.0051899650999712253"),
        (0xbddddbe4a05a2442, "-1.0862625390159209e-10"),
        (0xbbeb178931dc8009, "-4.5895526786147035e-20"),
        (0x3c323e692e644053, "9.8899796978307891e-19"),
        (0xc26c35e7d72c3ebe, "-969307765089.96069"),
        (0x3e118a542b60c548, "1.0209825602250723e-09"),
        (0x3e931b140dc9b646, "2.8469822924742651e-07"),
        (0x3d0393173c93c30e, "8.692856795647077e-15"),
        (0x41482863367c722b, "3166406.4256727896"),
        (0x42bc7809eb555aea, "31301888071002.914"),
        (0x40f056ac962f2263, "66922.786666044543"),
        (0x3fb8147a89a48de4, "0.094062479595372006"),
        (0x3e9932c1c57301a7, "3.7548347138138279e-07"),
        (0xc3fb49515f590b03, "-3.1459074916505104e+19"),
        (0xc052039966387bd2, "-72.056237750205838"),
        (0x3d70f4681572498c, "9.6376386365873396e-13"),
        (0xc41510d9f50823e0, "-9.7148974134441017e+19"),
        (0x3f094251f70d6bc7, "4.8177839636585509e-05"),
        (0xbc398d5aee4b4798, "-1.3851858432223631e-18"),
        (0xc0c03b26b9d27726, "-8310.3025458413867"),
        (0x3f7e5abdc7bda8b1, "0.0074107564249549654"),
        (0x3f602f1123ae369a, "0.0019755682710130397"),
        (0xbe0f4044426c38b7, "-9.0952501506428515e-10"),
        (0xc19054819022fa8a, "-68493412.034158856"),
        (0xc08f06095e71838d, "-992.75457466776572"),
        (0x430a3fe0e487bb55, "923573066725226.62"),
        (0xbc1a0ab373446c79, "-3.5293221109440202e-19"),
        (0x3fb7d79665a5b497, "0.093133354011757027"),
        (0xbe03635b38773f1c, "-5.6426828568303722e-10"),
        (0xc0c37d4f93e6d583, "-9978.6217011015451"),
        (0xbf4b45286eccba6b, "-0.00083221887834901192"),
        (0x3dce63fc7e6f79b6, "5.5280127527992388e-11"),
        (0xbbb7c8a60caf5caa, "-5.0364121042585912e-21"),
        (0xbccd7b743c60bf01, "-8.1829660737263153e-16"),
        (0xc36fa191b5ab86b8, "-71226971746219456"),
        (0xbbfb0e22138572ba, "-9.1666608461769462e-20"),
        (0xc40160c04bd8f9a0, "-4.0070788108938117e+19"),
        (0xc367bb3503c4b898, "-53438086681838784"),
        (0x3da420895d6b8235, "9.1527435972078947e-12"),
        (0x43917da916e34bde, "3.1508734662534541e+17"),
        (0xbfcc48a6078ac2f0, "-0.22096705787910009"),
        (0x42248d5b2c849edf, "44135454274.310295"),
        (0xc3d852c90b2a1a50, "-7.0107370191549399e+18"),
        (0x3c1522ad866326d6, "2.864388994090588e-19"),
        (0x4262e8bfa1b98640, "649714273740.19531"),
        (0x424da59606abed31, "254664248663.85306"),
        (0xc29a3e6b579cffa7, "-7213847799615.9131"),
        (0x4331f7a077325b9f, "5057343170698143"),
        (0x3fb999999999999a, "0.10000000000000001"),
        (0x3fe0000000000000, "0.5"),
        (0x3f1a36e2eb1c432d, "0.0001"),
        (0x3eef75104d551d69, "1.5e-05"),
        (0x405edd2f1a9fbe77, "123.456"),
        (0x4341c37937e08001, "10000000000000002"),
        (0xbf6a9fbe76c8b439, "-0.0032499999999999999"),
        (0x4376345785d89fff, "99999999999999984"),
    ];

    #[test]
    fn format_double_is_printf_17g() {
        for &(bits, want) in CASES {
            assert_eq!(super::format_double(f64::from_bits(bits)), want);
        }
    }
}
