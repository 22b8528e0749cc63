//! Geo commands through the real binary, side by side with redis-server
//! 7.0: random GEOADDs and searches of every form (RESP2 and RESP3) give
//! the same replies, scores and stored destinations, and the errors are
//! Redis's, in Redis's order.
mod common;
use common::*;

use rand::{rngs::StdRng, seq::SliceRandom, Rng, SeedableRng};

/// A point near Sicily (most searches find something) or anywhere.
fn point(rng: &mut StdRng) -> Vec<String> {
    if rng.gen_bool(0.7) {
        let lon = 13.0 + rng.gen_range(-2.0..2.0);
        let lat = 38.0 + rng.gen_range(-2.0..2.0);
        vec![format!("{lon}"), format!("{lat}")]
    } else {
        let lon = rng.gen_range(-180.0..180.0f64);
        let lat = rng.gen_range(-85.05..85.05f64);
        vec![format!("{lon:.5}"), format!("{lat:.5}")]
    }
}

fn member(rng: &mut StdRng) -> String {
    format!("m{}", rng.gen_range(0..40))
}

/// Random reply options: WITH*, ASC/DESC, COUNT [ANY].
fn options(rng: &mut StdRng, with: bool) -> Vec<String> {
    let mut o = Vec::new();
    if with {
        for w in ["WITHDIST", "WITHHASH", "WITHCOORD"] {
            if rng.gen_bool(0.4) {
                o.push(w.to_string());
            }
        }
    }
    if rng.gen_bool(0.5) {
        o.push(["ASC", "DESC"][rng.gen_range(0..2)].into());
    }
    if rng.gen_bool(0.5) {
        o.extend(["COUNT".into(), rng.gen_range(1..6).to_string()]);
        if rng.gen_bool(0.4) {
            o.push("ANY".into());
        }
    }
    o.shuffle(rng);
    o
}

fn draw(rng: &mut StdRng) -> Vec<Vec<String>> {
    let key = format!("g{}", rng.gen_range(0..3));
    let unit = ["m", "km", "mi", "ft", "KM"][rng.gen_range(0..5)].to_string();
    let from = |rng: &mut StdRng| {
        if rng.gen_bool(0.5) {
            let mut v = s(&["FROMLONLAT"]);
            v.extend(point(rng));
            v
        } else {
            vec!["FROMMEMBER".into(), member(rng)]
        }
    };
    let by = |rng: &mut StdRng, unit: &str| {
        let d = || ["1", "50", "200", "2000"];
        if rng.gen_bool(0.5) {
            s(&["BYRADIUS", d()[rng.gen_range(0..4)], unit])
        } else {
            s(&[
                "BYBOX",
                d()[rng.gen_range(0..4)],
                d()[rng.gen_range(0..4)],
                unit,
            ])
        }
    };
    let mut l = match rng.gen_range(0..10) {
        0..=3 => {
            let mut l = s(&["GEOADD", &key]);
            if rng.gen_bool(0.2) {
                l.push(["NX", "XX", "CH"][rng.gen_range(0..3)].into());
            }
            for _ in 0..rng.gen_range(1..5) {
                l.extend(point(rng));
                l.push(member(rng));
            }
            l
        }
        4 => [s(&["GEOPOS", &key]), vec![member(rng), member(rng)]].concat(),
        5 => [s(&["GEODIST", &key]), vec![member(rng), member(rng), unit]].concat(),
        6 => [s(&["GEOHASH", &key]), vec![member(rng), member(rng)]].concat(),
        7 => {
            let mut l = s(&["GEORADIUS", &key]);
            l.extend(point(rng));
            l.extend(s(&["300", &unit]));
            l
        }
        8 => [s(&["GEOSEARCH", &key]), from(rng), by(rng, &unit)].concat(),
        _ => {
            let mut l = [
                s(&["GEOSEARCHSTORE", "dst", &key]),
                from(rng),
                by(rng, &unit),
            ]
            .concat();
            if rng.gen_bool(0.5) {
                l.push("STOREDIST".into());
            }
            l.extend(options(rng, false));
            return vec![l, s(&["ZRANGE", "dst", "0", "-1", "WITHSCORES"])];
        }
    };
    if matches!(l[0].as_str(), "GEORADIUS" | "GEOSEARCH") {
        l.extend(options(rng, true));
    }
    vec![l, s(&["ZRANGE", &key, "0", "-1", "WITHSCORES"])]
}

#[test]
fn same_replies_as_redis() {
    let srv = Server::start(&[]);
    let o = RedisOracle::start(&[]);
    for resp in [2, 3] {
        let (a, b) = (&mut srv.conn(), &mut o.conn());
        let hello = s(&["HELLO", &resp.to_string()]);
        run(a, &hello).unwrap();
        run(b, &hello).unwrap();
        let mut rng = StdRng::seed_from_u64(resp);
        for step in 0..500 {
            for line in draw(&mut rng) {
                assert_eq!(
                    run(a, &line),
                    run(b, &line),
                    "RESP{resp} step {step}: {line:?}"
                );
            }
        }
        assert_eq!(digest(a), digest(b));
    }
}

#[test]
fn errors_as_redis() {
    let srv = Server::start(&[]);
    let o = RedisOracle::start(&[]);
    let (a, b) = (&mut srv.conn(), &mut o.conn());
    let setup = "GEOADD Sicily 13.361389 38.115556 Palermo 15.087269 37.502669 Catania";
    let lines = [
        setup,
        "SET str x",
        "GEOADD k 200 100 m",
        "GEOADD k 10 abc m",
        "GEOADD k NX XX 10 10 m",
        "GEOADD k 10 10",
        "GEOADD str 10 10 m",
        "GEOADD k 10 85.06 m",
        "GEODIST Sicily Palermo Catania xx",
        "GEODIST Sicily Palermo Catania km extra",
        "GEODIST nokey a b",
        "GEOPOS str a",
        "GEORADIUS Sicily 15 37 -1 km",
        "GEORADIUS Sicily 15 37 x km",
        "GEORADIUS Sicily 15 37 200 km COUNT 0",
        "GEORADIUS Sicily 15 37 200 km ANY",
        "GEORADIUS Sicily 15 37 200 km STORE d WITHDIST",
        "GEORADIUS nokey 15 37 200 km STORE d",
        "GEORADIUS_RO Sicily 15 37 200 km STORE d",
        "GEORADIUSBYMEMBER Sicily nope 100 km",
        "GEORADIUSBYMEMBER nokey nope x y",
        "GEOSEARCH Sicily BYRADIUS 10 km",
        "GEOSEARCH Sicily FROMLONLAT 15 37 COUNT 1",
        "GEOSEARCH Sicily FROMLONLAT 15 37 BYRADIUS 10 km BYBOX 1 1 km",
        "GEOSEARCH Sicily FROMMEMBER nope BYRADIUS 10 km",
        "GEOSEARCH Sicily FROMLONLAT 15 37 BYBOX -1 2 km",
        "GEOSEARCH Sicily FROMLONLAT 15 37 BYRADIUS 10 km STOREDIST",
        "geosearch Sicily BYRADIUS 10 km WITHDIST",
        "GEOSEARCHSTORE d Sicily FROMLONLAT 15 37 BYRADIUS 200 km WITHDIST",
        "GEOSEARCHSTORE d Sicily FROMLONLAT 15 37 BYRADIUS 200 km STOREDIST",
        "ZRANGE d 0 -1 WITHSCORES",
        "GEOSEARCHSTORE d nokey FROMLONLAT 15 37 BYRADIUS 200 km",
        "EXISTS d",
    ];
    for l in lines {
        let l: Vec<String> = l.split(' ').map(String::from).collect();
        assert_eq!(run(a, &l), run(b, &l), "{l:?}");
    }
}

#[test]
fn geoadd_is_counted_as_itself() {
    let srv = Server::start(&[]);
    let c = &mut srv.conn();
    let _: i64 = cmd(
        c,
        &["GEOADD", "k", "CH", "13.361389", "38.115556", "Palermo"],
    );
    assert_eq!(
        cmd::<Vec<String>>(c, &["ZRANGE", "k", "0", "-1", "WITHSCORES"]),
        ["Palermo", "3479099956230698"]
    );
    let stats: String = cmd(c, &["INFO", "commandstats"]);
    assert!(stats.contains("cmdstat_geoadd:calls=1"), "{stats}");
}
