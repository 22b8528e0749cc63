//! Geo commands (Redis's geo.c): GEOADD GEOPOS GEODIST GEOHASH GEOSEARCH
//! GEOSEARCHSTORE GEORADIUS[_RO] GEORADIUSBYMEMBER[_RO], on sorted sets
//! whose scores are 52-bit geohashes (`geo/geohash.rs` computes them as
//! Redis does, so a key written by either server answers the same on both).
//!
//! GEOADD is ZADD with computed scores: it validates every coordinate
//! first, then adds through `zsets::zadd_with` and propagates the ZADD it
//! stands for, as Redis rewrites it. The searches parse their options in
//! Redis's order and with its errors (a FROMMEMBER is looked up while
//! parsing, so a missing member errs before a later bad option), scan the
//! center cell and its neighbours in Redis's order, and sort stably by
//! distance when asked (or when COUNT is given without ANY). The STORE
//! forms write their destination through `zsets::store_sorted` and
//! propagate verbatim. Distances are replied with 4 decimals and
//! coordinates in Redis's "human" long double form (`%.17Lf`, trailing
//! zeros cut).

mod geohash;

use super::keyspec::KeySpec;
use super::util::{arg_i64, eq_ic};
use super::zsets::{self, parse_score, AddFlags};
use super::{flags::*, CmdError, CmdResult, Command, Ctx};
use crate::keyspace::zset::{key_cmp, ZSetValue};
use crate::keyspace::Value;
use crate::protocol::{Args, ReplyBuf};
use geohash::{Kind, Shape};

const RADIUS_CX: &str = "O(N+log(M)) where N is the number of elements inside the bounding box of the circular area delimited by center and radius and M is the number of items inside the index.";
const SEARCH_CX: &str = "O(N+log(M)) where N is the number of elements in the grid-aligned bounding box area around the shape provided as the filter and M is the number of items inside the shape";

pub(crate) static COMMANDS: &[Command] = crate::commands::command_table! {
    family(group = "geo", acl = "geo"),
    cmd("geoadd", -5, WRITE | DENYOOM, geoadd)
        .doc("3.2.0", "Add one or more geospatial items in the geospatial index represented using a sorted set")
        .complexity("O(log(N)) for each item added, where N is the number of elements in the sorted set.")
        .keys(1, 1, 1)
        .key_specs(&[KeySpec::at(1, &["RW", "update"])]),
    cmd("geodist", -4, READONLY, geodist)
        .doc("3.2.0", "Returns the distance between two members of a geospatial index")
        .complexity("O(log(N))")
        .keys(1, 1, 1)
        .key_specs(&[KeySpec::at(1, &["RO", "access"])]),
    cmd("geohash", -2, READONLY, geohash_cmd)
        .doc("3.2.0", "Returns members of a geospatial index as standard geohash strings")
        .complexity("O(log(N)) for each member requested, where N is the number of elements in the sorted set.")
        .keys(1, 1, 1)
        .key_specs(&[KeySpec::at(1, &["RO", "access"])]),
    cmd("geopos", -2, READONLY, geopos)
        .doc("3.2.0", "Returns longitude and latitude of members of a geospatial index")
        .complexity("O(N) where N is the number of members requested.")
        .keys(1, 1, 1)
        .key_specs(&[KeySpec::at(1, &["RO", "access"])]),
    cmd("georadius", -6, WRITE | DENYOOM, georadius)
        .doc("3.2.0", "Query a sorted set representing a geospatial index to fetch members matching a given maximum distance from a point")
        .complexity(RADIUS_CX)
        .keys(1, 1, 1)
        .keys_fn(radius_keys)
        .key_specs(&[
            KeySpec::at(1, &["RO", "access"]),
            KeySpec::keyword("STORE", 6, &["OW", "update"]),
            KeySpec::keyword("STOREDIST", 6, &["OW", "update"]),
        ]),
    cmd("georadius_ro", -6, READONLY, georadius_ro)
        .doc("3.2.10", "A read-only variant for GEORADIUS")
        .complexity(RADIUS_CX)
        .keys(1, 1, 1)
        .key_specs(&[KeySpec::at(1, &["RO", "access"])]),
    cmd("georadiusbymember", -5, WRITE | DENYOOM, georadiusbymember)
        .doc("3.2.0", "Query a sorted set representing a geospatial index to fetch members matching a given maximum distance from a member")
        .complexity(RADIUS_CX)
        .keys(1, 1, 1)
        .keys_fn(radius_keys)
        .key_specs(&[
            KeySpec::at(1, &["RO", "access"]),
            KeySpec::keyword("STORE", 5, &["OW", "update"]),
            KeySpec::keyword("STOREDIST", 5, &["OW", "update"]),
        ]),
    cmd("georadiusbymember_ro", -5, READONLY, georadiusbymember_ro)
        .doc("3.2.10", "A read-only variant for GEORADIUSBYMEMBER")
        .complexity(RADIUS_CX)
        .keys(1, 1, 1)
        .key_specs(&[KeySpec::at(1, &["RO", "access"])]),
    cmd("geosearch", -7, READONLY, geosearch)
        .doc("6.2.0", "Query a sorted set representing a geospatial index to fetch members inside an area of a box or a circle.")
        .complexity(SEARCH_CX)
        .keys(1, 1, 1)
        .key_specs(&[KeySpec::at(1, &["RO", "access"])]),
    cmd("geosearchstore", -8, WRITE | DENYOOM, geosearchstore)
        .doc("6.2.0", "Query a sorted set representing a geospatial index to fetch members inside an area of a box or a circle, and store the result in another key.")
        .complexity(SEARCH_CX)
        .keys(1, 2, 1)
        .key_specs(&[
            KeySpec::at(1, &["OW", "update"]),
            KeySpec::at(2, &["RO", "access"]),
        ]),
};

/// GEORADIUS[BYMEMBER]'s keys: the source and the last STORE/STOREDIST
/// key (Redis's georadiusGetKeys).
fn radius_keys(args: Args) -> Vec<usize> {
    let mut keys = vec![1];
    let mut i = 5;
    while i + 1 < args.len() {
        let a = args.get(i);
        if eq_ic(a, "store") || eq_ic(a, "storedist") {
            keys.truncate(1);
            keys.push(i + 1);
            i += 1;
        }
        i += 1;
    }
    keys
}

fn zset_of(v: &Value) -> &ZSetValue {
    match v {
        Value::ZSet(z) => z,
        _ => unreachable!("type checked by get_zset"),
    }
}

/// A coordinate pair argument (extractLongLatOrReply).
fn lon_lat(lon: &[u8], lat: &[u8]) -> Result<[f64; 2], CmdError> {
    let lon = parse_score(lon).ok_or(CmdError::NotFloat)?;
    let lat = parse_score(lat).ok_or(CmdError::NotFloat)?;
    let ok = (geohash::LONG_MIN..=geohash::LONG_MAX).contains(&lon)
        && (geohash::LAT_MIN..=geohash::LAT_MAX).contains(&lat);
    if !ok {
        let msg = format!("invalid longitude,latitude pair {lon:.6},{lat:.6}");
        return Err(CmdError::err(msg));
    }
    Ok([lon, lat])
}

/// Meters per unit (extractUnitOrReply).
fn unit(a: &[u8]) -> Result<f64, CmdError> {
    match () {
        _ if eq_ic(a, "m") => Ok(1.0),
        _ if eq_ic(a, "km") => Ok(1000.0),
        _ if eq_ic(a, "ft") => Ok(0.3048),
        _ if eq_ic(a, "mi") => Ok(1609.34),
        _ => Err(CmdError::err(
            "unsupported unit provided. please use M, KM, FT, MI",
        )),
    }
}

/// A non-negative size and its unit: (meters per unit, size).
fn size(a: &[u8], what: &str) -> Result<f64, CmdError> {
    parse_score(a).ok_or_else(|| CmdError::err(format!("need numeric {what}")))
}

fn radius_arg(r: &[u8], u: &[u8]) -> Result<(f64, Kind), CmdError> {
    let r = size(r, "radius")?;
    if r < 0.0 {
        return Err(CmdError::err("radius cannot be negative"));
    }
    Ok((unit(u)?, Kind::Radius(r)))
}

fn box_arg(w: &[u8], h: &[u8], u: &[u8]) -> Result<(f64, Kind), CmdError> {
    let (width, height) = (size(w, "width")?, size(h, "height")?);
    if width < 0.0 || height < 0.0 {
        return Err(CmdError::err("height or width cannot be negative"));
    }
    Ok((unit(u)?, Kind::Box { width, height }))
}

/// The position of member `m` (longLatFromMember).
fn member_xy(z: &ZSetValue, m: &[u8]) -> Result<[f64; 2], CmdError> {
    let s = z
        .score(m)
        .ok_or_else(|| CmdError::err("could not decode requested zset member"))?;
    Ok(geohash::decode_score(s))
}

/// A distance with four decimals (fixedpoint_d2string).
fn fixed4(d: f64) -> String {
    if d == 0.0 {
        return "0.0000".into();
    }
    let v = (d * 10000.0).round_ties_even() as i64;
    let sign = if v < 0 { "-" } else { "" };
    let a = v.unsigned_abs();
    format!("{sign}{}.{:04}", a / 10000, a % 10000)
}

/// A coordinate as addReplyHumanLongDouble writes it.
fn human(out: &mut ReplyBuf, d: f64) {
    let mut s = format!("{d:.17}");
    if s.contains('.') {
        s.truncate(s.trim_end_matches('0').trim_end_matches('.').len());
    }
    if s == "-0" {
        s = "0".into();
    }
    if out.resp >= 3 {
        out.raw(format!(",{s}\r\n").as_bytes());
    } else {
        out.bulk(s.as_bytes());
    }
}

fn geoadd(ctx: &mut Ctx, args: Args) -> CmdResult {
    let mut f = AddFlags::default();
    let mut i = 2;
    while i < args.len() {
        let a = args.get(i);
        match () {
            _ if eq_ic(a, "nx") => f.nx = true,
            _ if eq_ic(a, "xx") => f.xx = true,
            _ if eq_ic(a, "ch") => f.ch = true,
            _ => break,
        }
        i += 1;
    }
    let rest = args.len() - i;
    if rest == 0 || !rest.is_multiple_of(3) || (f.xx && f.nx) {
        return Err(CmdError::Syntax);
    }
    let mut scores = Vec::with_capacity(rest / 3);
    for j in (i..args.len()).step_by(3) {
        let [lon, lat] = lon_lat(args.get(j), args.get(j + 1))?;
        scores.push(geohash::score_of(lon, lat).unwrap_or(0.0));
    }
    let texts: Vec<String> = scores.iter().map(|s| (*s as u64).to_string()).collect();
    let mut argv: Vec<&[u8]> = vec![b"ZADD"];
    argv.extend(args.iter().skip(1).take(i - 1));
    let mut pairs = Vec::with_capacity(scores.len());
    for (k, j) in (i..args.len()).step_by(3).enumerate() {
        pairs.push((scores[k], args.get(j + 2)));
        argv.push(texts[k].as_bytes());
        argv.push(args.get(j + 2));
    }
    zsets::zadd_with(ctx, args.get(1), f, &pairs, &argv)
}

fn geopos(ctx: &mut Ctx, args: Args) -> CmdResult {
    let key = args.get(1);
    let mut l = ctx.open(key);
    let z = l.get_zset(key)?.map(|e| zset_of(&e.value));
    ctx.read_hit(key, z.is_some());
    ctx.out.array(args.len() - 2);
    for m in args.iter().skip(2) {
        match z.and_then(|z| z.score(m)) {
            None => ctx.out.null_array(),
            Some(s) => {
                let [lon, lat] = geohash::decode_score(s);
                ctx.out.array(2);
                human(ctx.out, lon);
                human(ctx.out, lat);
            }
        }
    }
    Ok(())
}

fn geodist(ctx: &mut Ctx, args: Args) -> CmdResult {
    let to_meter = match args.len() {
        5 => unit(args.get(4))?,
        n if n > 5 => return Err(CmdError::Syntax),
        _ => 1.0,
    };
    let key = args.get(1);
    let mut l = ctx.open(key);
    let z = l.get_zset(key)?.map(|e| zset_of(&e.value));
    ctx.read_hit(key, z.is_some());
    let scores = z.and_then(|z| Some((z.score(args.get(2))?, z.score(args.get(3))?)));
    match scores {
        None => ctx.out.null(),
        Some((a, b)) => {
            let ([x1, y1], [x2, y2]) = (geohash::decode_score(a), geohash::decode_score(b));
            let d = geohash::distance(x1, y1, x2, y2) / to_meter;
            ctx.out.bulk(fixed4(d).as_bytes());
        }
    }
    Ok(())
}

fn geohash_cmd(ctx: &mut Ctx, args: Args) -> CmdResult {
    let key = args.get(1);
    let mut l = ctx.open(key);
    let z = l.get_zset(key)?.map(|e| zset_of(&e.value));
    ctx.read_hit(key, z.is_some());
    ctx.out.array(args.len() - 2);
    for m in args.iter().skip(2) {
        match z.and_then(|z| z.score(m)) {
            None => ctx.out.null(),
            Some(s) => ctx.out.bulk(&geohash::standard_hash(s)),
        }
    }
    Ok(())
}

// ---------------------------------------------------------------- searches

#[derive(Clone, Copy, PartialEq)]
enum Variant {
    Radius,
    RadiusRo,
    ByMember,
    ByMemberRo,
    Search,
    SearchStore,
}

impl Variant {
    fn src(self) -> usize {
        if self == Variant::SearchStore {
            2
        } else {
            1
        }
    }

    fn is_search(self) -> bool {
        matches!(self, Variant::Search | Variant::SearchStore)
    }

    fn can_store(self) -> bool {
        matches!(self, Variant::Radius | Variant::ByMember)
    }
}

#[derive(Clone, Copy, PartialEq)]
enum Sort {
    None,
    Asc,
    Desc,
}

/// A search's parsed options (georadiusGeneric's locals).
struct Query {
    shape: Shape,
    withdist: bool,
    withhash: bool,
    withcoord: bool,
    sort: Sort,
    any: bool,
    count: usize,
    /// The destination's argument index and whether it takes distances.
    store: Option<(usize, bool)>,
}

/// One match.
struct Point {
    member: Box<[u8]>,
    xy: [f64; 2],
    dist: f64,
    score: f64,
}

fn georadius(ctx: &mut Ctx, args: Args) -> CmdResult {
    search(ctx, args, Variant::Radius)
}

fn georadius_ro(ctx: &mut Ctx, args: Args) -> CmdResult {
    search(ctx, args, Variant::RadiusRo)
}

fn georadiusbymember(ctx: &mut Ctx, args: Args) -> CmdResult {
    search(ctx, args, Variant::ByMember)
}

fn georadiusbymember_ro(ctx: &mut Ctx, args: Args) -> CmdResult {
    search(ctx, args, Variant::ByMemberRo)
}

fn geosearch(ctx: &mut Ctx, args: Args) -> CmdResult {
    search(ctx, args, Variant::Search)
}

fn geosearchstore(ctx: &mut Ctx, args: Args) -> CmdResult {
    search(ctx, args, Variant::SearchStore)
}

/// Every key a search may write: GEOSEARCHSTORE's destination, or each
/// argument after a STORE/STOREDIST (the parse decides which counts).
fn store_candidates(args: Args<'_>, v: Variant) -> Vec<&[u8]> {
    match v {
        Variant::SearchStore => vec![args.get(1)],
        _ if v.can_store() => (5..args.len().saturating_sub(1))
            .filter(|&i| eq_ic(args.get(i), "store") || eq_ic(args.get(i), "storedist"))
            .map(|i| args.get(i + 1))
            .collect(),
        _ => vec![],
    }
}

fn search(ctx: &mut Ctx, args: Args, v: Variant) -> CmdResult {
    let src = args.get(v.src());
    let mut keys = vec![src];
    keys.extend(store_candidates(args, v));
    let mut l = ctx.open_many(keys.iter().copied());
    let (q, found) = {
        let z = l.get_zset(src)?.map(|e| zset_of(&e.value));
        ctx.read_hit(src, z.is_some());
        let q = parse(args, v, z)?;
        let found = z.map(|z| collect(z, &q));
        (q, found)
    };
    let Some(mut pts) = found else {
        match q.store {
            Some((i, _)) => {
                let argv: Vec<&[u8]> = args.iter().collect();
                zsets::store_sorted(ctx, &mut l, args.get(i), vec![], "del", &argv);
            }
            None => ctx.out.array(0),
        }
        return Ok(());
    };
    // COUNT without ANY wants the nearest: ascending unless told.
    let sort = match q.sort {
        Sort::None if q.count > 0 && !q.any => Sort::Asc,
        s => s,
    };
    match sort {
        Sort::Asc => pts.sort_by(|a, b| a.dist.total_cmp(&b.dist)),
        Sort::Desc => pts.sort_by(|a, b| b.dist.total_cmp(&a.dist)),
        Sort::None => {}
    }
    if q.count > 0 {
        pts.truncate(q.count);
    }
    let conv = q.shape.conversion;
    let Some((dst, storedist)) = q.store else {
        reply_points(ctx.out, &q, &pts);
        return Ok(());
    };
    let mut items: Vec<(Box<[u8]>, f64)> = pts
        .into_iter()
        .map(|p| (p.member, if storedist { p.dist / conv } else { p.score }))
        .collect();
    items.sort_by(|a, b| key_cmp(a.1, &a.0, b.1, &b.0));
    let event = if v.is_search() {
        "geosearchstore"
    } else {
        "georadiusstore"
    };
    let argv: Vec<&[u8]> = args.iter().collect();
    zsets::store_sorted(ctx, &mut l, args.get(dst), items, event, &argv);
    Ok(())
}

fn reply_points(out: &mut ReplyBuf, q: &Query, pts: &[Point]) {
    let opts = q.withdist as usize + q.withhash as usize + q.withcoord as usize;
    out.array(pts.len());
    for p in pts {
        if opts > 0 {
            out.array(opts + 1);
        }
        out.bulk(&p.member);
        if q.withdist {
            out.bulk(fixed4(p.dist / q.shape.conversion).as_bytes());
        }
        if q.withhash {
            out.int(p.score as i64);
        }
        if q.withcoord {
            out.array(2);
            human(out, p.xy[0]);
            human(out, p.xy[1]);
        }
    }
}

/// The members inside the shape, cell by cell in Redis's order, stopping
/// at COUNT with ANY (membersOfAllNeighbors, geoGetPointsInRange).
fn collect(z: &ZSetValue, q: &Query) -> Vec<Point> {
    let limit = if q.any { q.count } else { 0 };
    let full = |pts: &Vec<Point>| limit > 0 && pts.len() >= limit;
    let cells = geohash::cells(&q.shape);
    let mut pts = Vec::new();
    let mut last = None;
    for i in 0..cells.len() {
        if geohash::skip(&cells, i, last) {
            continue;
        }
        if full(&pts) {
            break;
        }
        let (min, max) = geohash::score_range(cells[i]);
        let first = z.count_below(&|s, _| s < min);
        for (m, s) in z.iter_from(first, false) {
            if s >= max {
                break;
            }
            let xy = geohash::decode_score(s);
            if let Some(dist) = q.shape.within(xy[0], xy[1]) {
                let member = m.into();
                pts.push(Point {
                    member,
                    xy,
                    dist,
                    score: s,
                });
            }
            if full(&pts) {
                break;
            }
        }
        // Redis compares a cell with the last one scanned, but takes
        // "none yet" and "the center" alike.
        last = (i > 0).then_some(i);
    }
    pts
}

/// The options of a search, in georadiusGeneric's order and with its
/// errors; `z` is the source, for members named as centers.
fn parse(args: Args, v: Variant, z: Option<&ZSetValue>) -> Result<Query, CmdError> {
    let mut q = Query {
        shape: Shape {
            xy: [0.0; 2],
            conversion: 1.0,
            kind: Kind::Radius(0.0),
        },
        withdist: false,
        withhash: false,
        withcoord: false,
        sort: Sort::None,
        any: false,
        count: 0,
        store: None,
    };
    let base = match v {
        Variant::Radius | Variant::RadiusRo => {
            q.shape.xy = lon_lat(args.get(2), args.get(3))?;
            (q.shape.conversion, q.shape.kind) = radius_arg(args.get(4), args.get(5))?;
            6
        }
        Variant::ByMember | Variant::ByMemberRo => {
            if let Some(z) = z {
                q.shape.xy = member_xy(z, args.get(2))?;
                (q.shape.conversion, q.shape.kind) = radius_arg(args.get(3), args.get(4))?;
            }
            5
        }
        Variant::Search => 2,
        Variant::SearchStore => {
            q.store = Some((1, false));
            3
        }
    };
    let (from, by) = parse_options(args, v, z, base, &mut q)?;
    check(args, v, &q, from, by)?;
    Ok(q)
}

/// The optional arguments from `base`; whether a center (FROMMEMBER /
/// FROMLONLAT) and a shape (BYRADIUS / BYBOX) were given.
fn parse_options(
    args: Args,
    v: Variant,
    z: Option<&ZSetValue>,
    base: usize,
    q: &mut Query,
) -> Result<(bool, bool), CmdError> {
    let (mut frommember, mut fromloc, mut byradius, mut bybox) = (false, false, false, false);
    let search = v.is_search();
    let n = args.len();
    let mut i = base;
    while i < n {
        let a = args.get(i);
        let more = n - i - 1;
        let is = |name: &str| eq_ic(a, name);
        if is("withdist") {
            q.withdist = true;
        } else if is("withhash") {
            q.withhash = true;
        } else if is("withcoord") {
            q.withcoord = true;
        } else if is("any") {
            q.any = true;
        } else if is("asc") {
            q.sort = Sort::Asc;
        } else if is("desc") {
            q.sort = Sort::Desc;
        } else if is("count") && more >= 1 {
            let c = arg_i64(args.get(i + 1))?;
            if c <= 0 {
                return Err(CmdError::err("COUNT must be > 0"));
            }
            q.count = c as usize;
            i += 1;
        } else if (is("store") || is("storedist")) && more >= 1 && v.can_store() {
            q.store = Some((i + 1, is("storedist")));
            i += 1;
        } else if is("storedist") && v == Variant::SearchStore {
            q.store = Some((1, true));
        } else if is("frommember") && more >= 1 && search && !fromloc {
            if let Some(z) = z {
                q.shape.xy = member_xy(z, args.get(i + 1))?;
            }
            frommember = true;
            i += 1;
        } else if is("fromlonlat") && more >= 2 && search && !frommember {
            q.shape.xy = lon_lat(args.get(i + 1), args.get(i + 2))?;
            fromloc = true;
            i += 2;
        } else if is("byradius") && more >= 2 && search && !bybox {
            (q.shape.conversion, q.shape.kind) = radius_arg(args.get(i + 1), args.get(i + 2))?;
            byradius = true;
            i += 2;
        } else if is("bybox") && more >= 3 && search && !byradius {
            let (w, h, u) = (args.get(i + 1), args.get(i + 2), args.get(i + 3));
            (q.shape.conversion, q.shape.kind) = box_arg(w, h, u)?;
            bybox = true;
            i += 3;
        } else {
            return Err(CmdError::Syntax);
        }
        i += 1;
    }
    Ok((frommember || fromloc, byradius || bybox))
}

/// The combinations Redis refuses after parsing.
fn check(args: Args, v: Variant, q: &Query, from: bool, by: bool) -> CmdResult {
    if q.store.is_some() && (q.withdist || q.withhash || q.withcoord) {
        let who = if v == Variant::SearchStore {
            "GEOSEARCHSTORE"
        } else {
            "STORE option in GEORADIUS"
        };
        return Err(CmdError::err(format!(
            "{who} is not compatible with WITHDIST, WITHHASH and WITHCOORD options"
        )));
    }
    let name = String::from_utf8_lossy(args.get(0));
    if v.is_search() && !from {
        return Err(CmdError::err(format!(
            "exactly one of FROMMEMBER or FROMLONLAT can be specified for {name}"
        )));
    }
    if v.is_search() && !by {
        return Err(CmdError::err(format!(
            "exactly one of BYRADIUS and BYBOX can be specified for {name}"
        )));
    }
    if q.any && q.count == 0 {
        return Err(CmdError::err("the ANY argument requires COUNT argument"));
    }
    Ok(())
}
