//! Geohash arithmetic as Redis's geohash.c and geohash_helper.c compute it,
//! in the same f64 operations and order, so scores, decoded coordinates,
//! distances and the cells a search visits are bit-for-bit Redis's.
//!
//! A position is a 52-bit interleaved geohash (26 bits of latitude in the
//! even bits, 26 of longitude in the odd ones) over longitude -180..180 and
//! latitude -85.05112878..85.05112878 (the Web Mercator limits), stored as
//! a sorted-set score. A search covers its shape with the cell of the
//! center at a precision estimated from the radius plus its eight
//! neighbours (some dropped when they cannot hold a match), then scans each
//! cell's score range and filters by exact distance.

use std::f64::consts::PI;

pub(super) const STEP_MAX: u8 = 26;
pub(super) const LAT_MIN: f64 = -85.051_128_78;
pub(super) const LAT_MAX: f64 = 85.051_128_78;
pub(super) const LONG_MIN: f64 = -180.0;
pub(super) const LONG_MAX: f64 = 180.0;
const D_R: f64 = PI / 180.0;
pub(super) const EARTH_RADIUS: f64 = 6_372_797.560_856;
const MERCATOR_MAX: f64 = 20_037_726.37;

/// A cell: `step` bits of each coordinate, interleaved.
#[derive(Clone, Copy, Debug, PartialEq, Default)]
pub(super) struct Bits {
    pub bits: u64,
    pub step: u8,
}

impl Bits {
    fn is_zero(self) -> bool {
        self.bits == 0 && self.step == 0
    }
}

#[derive(Clone, Copy, Debug, Default)]
pub(super) struct Range {
    pub min: f64,
    pub max: f64,
}

/// The longitude and latitude ranges a cell covers.
#[derive(Clone, Copy, Debug, Default)]
pub(super) struct Area {
    pub lon: Range,
    pub lat: Range,
}

/// Redis's coordinate ranges (geohashGetCoordRange).
pub(super) const WGS84: (Range, Range) = (
    Range {
        min: LONG_MIN,
        max: LONG_MAX,
    },
    Range {
        min: LAT_MIN,
        max: LAT_MAX,
    },
);

fn interleave(x: u32, y: u32) -> u64 {
    fn spread(v: u32) -> u64 {
        let mut v = v as u64;
        v = (v | (v << 16)) & 0x0000_FFFF_0000_FFFF;
        v = (v | (v << 8)) & 0x00FF_00FF_00FF_00FF;
        v = (v | (v << 4)) & 0x0F0F_0F0F_0F0F_0F0F;
        v = (v | (v << 2)) & 0x3333_3333_3333_3333;
        (v | (v << 1)) & 0x5555_5555_5555_5555
    }
    spread(x) | (spread(y) << 1)
}

/// The even bits in the low half, the odd bits in the high half.
fn deinterleave(v: u64) -> u64 {
    fn squash(mut v: u64) -> u64 {
        v &= 0x5555_5555_5555_5555;
        v = (v | (v >> 1)) & 0x3333_3333_3333_3333;
        v = (v | (v >> 2)) & 0x0F0F_0F0F_0F0F_0F0F;
        v = (v | (v >> 4)) & 0x00FF_00FF_00FF_00FF;
        v = (v | (v >> 8)) & 0x0000_FFFF_0000_FFFF;
        (v | (v >> 16)) & 0x0000_0000_FFFF_FFFF
    }
    squash(v) | (squash(v >> 1) << 32)
}

/// The cell of `step` bits holding (lon, lat) over the given ranges;
/// None outside Redis's limits (geohashEncode).
pub(super) fn encode(ranges: (Range, Range), lon: f64, lat: f64, step: u8) -> Option<Bits> {
    let (lon_r, lat_r) = ranges;
    if !(LONG_MIN..=LONG_MAX).contains(&lon) || !(LAT_MIN..=LAT_MAX).contains(&lat) {
        return None;
    }
    if lat < lat_r.min || lat > lat_r.max || lon < lon_r.min || lon > lon_r.max {
        return None;
    }
    let scale = (1u64 << step) as f64;
    let lat_off = (lat - lat_r.min) / (lat_r.max - lat_r.min) * scale;
    let lon_off = (lon - lon_r.min) / (lon_r.max - lon_r.min) * scale;
    Some(Bits {
        bits: interleave(lat_off as u32, lon_off as u32),
        step,
    })
}

/// The area of a cell (geohashDecode).
pub(super) fn decode(ranges: (Range, Range), h: Bits) -> Area {
    let (lon_r, lat_r) = ranges;
    let sep = deinterleave(h.bits);
    let (ilat, ilon) = (sep as u32, (sep >> 32) as u32);
    let div = (1u64 << h.step) as f64;
    let (lat_scale, lon_scale) = (lat_r.max - lat_r.min, lon_r.max - lon_r.min);
    let at = |min: f64, i: u32, scale: f64| min + (i as f64 * 1.0 / div) * scale;
    Area {
        lat: Range {
            min: at(lat_r.min, ilat, lat_scale),
            max: at(lat_r.min, ilat.wrapping_add(1), lat_scale),
        },
        lon: Range {
            min: at(lon_r.min, ilon, lon_scale),
            max: at(lon_r.min, ilon.wrapping_add(1), lon_scale),
        },
    }
}

/// The center of an area, clamped to the limits: [lon, lat].
pub(super) fn center(a: &Area) -> [f64; 2] {
    let lon = ((a.lon.min + a.lon.max) / 2.0).clamp(LONG_MIN, LONG_MAX);
    let lat = ((a.lat.min + a.lat.max) / 2.0).clamp(LAT_MIN, LAT_MAX);
    [lon, lat]
}

/// The position a sorted-set score stands for (decodeGeohash).
pub(super) fn decode_score(score: f64) -> [f64; 2] {
    let h = Bits {
        bits: score as u64,
        step: STEP_MAX,
    };
    center(&decode(WGS84, h))
}

/// A cell's 52-bit score prefix (geohashAlign52Bits).
pub(super) fn align52(h: Bits) -> u64 {
    h.bits << (52 - h.step as u32 * 2)
}

/// The score of a position (GEOADD's).
pub(super) fn score_of(lon: f64, lat: f64) -> Option<f64> {
    encode(WGS84, lon, lat, STEP_MAX).map(|h| align52(h) as f64)
}

fn deg_rad(a: f64) -> f64 {
    a * D_R
}

fn rad_deg(a: f64) -> f64 {
    a / D_R
}

/// Haversine distance in meters (geohashGetDistance).
pub(super) fn distance(lon1: f64, lat1: f64, lon2: f64, lat2: f64) -> f64 {
    let (lon1r, lon2r) = (deg_rad(lon1), deg_rad(lon2));
    let v = ((lon2r - lon1r) / 2.0).sin();
    if v == 0.0 {
        return lat_distance(lat1, lat2);
    }
    let (lat1r, lat2r) = (deg_rad(lat1), deg_rad(lat2));
    let u = ((lat2r - lat1r) / 2.0).sin();
    let a = u * u + lat1r.cos() * lat2r.cos() * v * v;
    2.0 * EARTH_RADIUS * a.sqrt().asin()
}

fn lat_distance(lat1: f64, lat2: f64) -> f64 {
    EARTH_RADIUS * (deg_rad(lat2) - deg_rad(lat1)).abs()
}

/// What a search covers: a circle or a box around `xy`, sizes in the
/// unit `conversion` converts to meters.
#[derive(Clone, Copy, Debug)]
pub(super) struct Shape {
    pub xy: [f64; 2],
    pub conversion: f64,
    pub kind: Kind,
}

#[derive(Clone, Copy, Debug)]
pub(super) enum Kind {
    Radius(f64),
    Box { width: f64, height: f64 },
}

impl Shape {
    /// The distance from the center to a point inside the shape, or None
    /// (geoWithinShape).
    pub(super) fn within(&self, lon: f64, lat: f64) -> Option<f64> {
        let [x1, y1] = self.xy;
        match self.kind {
            Kind::Radius(r) => {
                let d = distance(x1, y1, lon, lat);
                (d <= r * self.conversion).then_some(d)
            }
            Kind::Box { width, height } => {
                let (w, h) = (width * self.conversion, height * self.conversion);
                if lat_distance(lat, y1) > h / 2.0 {
                    return None;
                }
                if distance(lon, lat, x1, lat) > w / 2.0 {
                    return None;
                }
                Some(distance(x1, y1, lon, lat))
            }
        }
    }

    /// [min lon, min lat, max lon, max lat] (geohashBoundingBox).
    fn bounds(&self) -> [f64; 4] {
        let [lon, lat] = self.xy;
        let (h, w) = match self.kind {
            Kind::Radius(r) => (r, r),
            Kind::Box { width, height } => (height / 2.0, width / 2.0),
        };
        let (height, width) = (self.conversion * h, self.conversion * w);
        let lat_delta = rad_deg(height / EARTH_RADIUS);
        let top = rad_deg(width / EARTH_RADIUS / deg_rad(lat + lat_delta).cos());
        let bottom = rad_deg(width / EARTH_RADIUS / deg_rad(lat - lat_delta).cos());
        let d = if lat < 0.0 { bottom } else { top };
        [lon - d, lat - lat_delta, lon + d, lat + lat_delta]
    }

    fn radius_meters(&self) -> f64 {
        let r = match self.kind {
            Kind::Radius(r) => r,
            Kind::Box { width, height } => {
                ((width / 2.0) * (width / 2.0) + (height / 2.0) * (height / 2.0)).sqrt()
            }
        };
        r * self.conversion
    }
}

/// The precision whose cells fit a search of `range` meters at `lat`
/// (geohashEstimateStepsByRadius).
fn estimate_steps(mut range: f64, lat: f64) -> u8 {
    if range == 0.0 {
        return 26;
    }
    let mut step: i32 = 1;
    while range < MERCATOR_MAX {
        range *= 2.0;
        step += 1;
    }
    step -= 2;
    if !(-66.0..=66.0).contains(&lat) {
        step -= 1;
        if !(-80.0..=80.0).contains(&lat) {
            step -= 1;
        }
    }
    step.clamp(1, 26) as u8
}

fn move_x(h: &mut Bits, d: i8) {
    if d == 0 {
        return;
    }
    let mut x = h.bits & 0xaaaa_aaaa_aaaa_aaaa;
    let y = h.bits & 0x5555_5555_5555_5555;
    let zz = 0x5555_5555_5555_5555u64 >> (64 - h.step as u32 * 2);
    if d > 0 {
        x = x.wrapping_add(zz + 1);
    } else {
        x = (x | zz).wrapping_sub(zz + 1);
    }
    x &= 0xaaaa_aaaa_aaaa_aaaau64 >> (64 - h.step as u32 * 2);
    h.bits = x | y;
}

fn move_y(h: &mut Bits, d: i8) {
    if d == 0 {
        return;
    }
    let x = h.bits & 0xaaaa_aaaa_aaaa_aaaa;
    let mut y = h.bits & 0x5555_5555_5555_5555;
    let zz = 0xaaaa_aaaa_aaaa_aaaau64 >> (64 - h.step as u32 * 2);
    if d > 0 {
        y = y.wrapping_add(zz + 1);
    } else {
        y = (y | zz).wrapping_sub(zz + 1);
    }
    y &= 0x5555_5555_5555_5555u64 >> (64 - h.step as u32 * 2);
    h.bits = x | y;
}

/// The neighbour of `h` `dx` cells east and `dy` north.
fn neighbour(h: Bits, dx: i8, dy: i8) -> Bits {
    let mut n = h;
    move_x(&mut n, dx);
    move_y(&mut n, dy);
    n
}

/// The cells a search scans, in Redis's order (center, N, S, E, W, NE,
/// NW, SE, SW), a dropped neighbour as the zero cell
/// (geohashCalculateAreasByShapeWGS84 and membersOfAllNeighbors' order).
pub(super) fn cells(shape: &Shape) -> [Bits; 9] {
    let [min_lon, min_lat, max_lon, max_lat] = shape.bounds();
    let [lon, lat] = shape.xy;
    let mut steps = estimate_steps(shape.radius_meters(), lat);
    let hash = encode(WGS84, lon, lat, steps).unwrap_or_default();
    let area_of = |dx, dy| decode(WGS84, neighbour(hash, dx, dy));
    let decrease = area_of(0, 1).lat.max < max_lat
        || area_of(0, -1).lat.min > min_lat
        || area_of(1, 0).lon.max < max_lon
        || area_of(-1, 0).lon.min > min_lon;
    if steps > 1 && decrease {
        steps -= 1;
    }
    let hash = encode(WGS84, lon, lat, steps).unwrap_or_default();
    let area = decode(WGS84, hash);
    const DIRS: [(i8, i8); 9] = [
        (0, 0),
        (0, 1),
        (0, -1),
        (1, 0),
        (-1, 0),
        (1, 1),
        (-1, 1),
        (1, -1),
        (-1, -1),
    ];
    let mut out = DIRS.map(|(dx, dy)| neighbour(hash, dx, dy));
    if steps >= 2 {
        let drop = |out: &mut [Bits; 9], dirs: (i8, i8)| {
            for (i, &(dx, dy)) in DIRS.iter().enumerate().skip(1) {
                if (dirs.0 != 0 && dx == dirs.0) || (dirs.1 != 0 && dy == dirs.1) {
                    out[i] = Bits::default();
                }
            }
        };
        if area.lat.min < min_lat {
            drop(&mut out, (0, -1));
        }
        if area.lat.max > max_lat {
            drop(&mut out, (0, 1));
        }
        if area.lon.min < min_lon {
            drop(&mut out, (-1, 0));
        }
        if area.lon.max > max_lon {
            drop(&mut out, (1, 0));
        }
    }
    out
}

/// The score range [min, max) of a cell (scoresOfGeoHashBox).
pub(super) fn score_range(h: Bits) -> (f64, f64) {
    let next = Bits {
        bits: h.bits + 1,
        step: h.step,
    };
    (align52(h) as f64, align52(next) as f64)
}

/// Whether a scanned cell is to be skipped: zero (dropped), or the same as
/// the one scanned last (huge radii make neighbours coincide).
pub(super) fn skip(cells: &[Bits; 9], i: usize, last: Option<usize>) -> bool {
    cells[i].is_zero() || last.is_some_and(|l| cells[l] == cells[i])
}

/// GEOHASH's standard 11-character geohash of a score (latitude over
/// -90..90, as the standard wants, with a zero last character).
pub(super) fn standard_hash(score: f64) -> [u8; 11] {
    const ALPHABET: &[u8; 32] = b"0123456789bcdefghjkmnpqrstuvwxyz";
    let [lon, lat] = decode_score(score);
    let std = (
        Range {
            min: -180.0,
            max: 180.0,
        },
        Range {
            min: -90.0,
            max: 90.0,
        },
    );
    let bits = encode(std, lon, lat, 26).map_or(0, |h| h.bits);
    let mut out = [b'0'; 11];
    for (i, c) in out.iter_mut().enumerate().take(10) {
        *c = ALPHABET[((bits >> (52 - (i + 1) * 5)) & 0x1f) as usize];
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn interleave_round_trips() {
        for (x, y) in [
            (0u32, 0u32),
            (1, 0),
            (0, 1),
            (0x3ff_ffff, 0x123_4567),
            (77, 99),
        ] {
            let sep = deinterleave(interleave(x, y));
            assert_eq!((sep as u32, (sep >> 32) as u32), (x, y));
        }
    }

    #[test]
    fn known_scores_and_hashes() {
        // Palermo and Catania, as redis-server 7.0 scores and hashes them.
        assert_eq!(score_of(13.361389, 38.115556), Some(3479099956230698.0));
        assert_eq!(score_of(15.087269, 37.502669), Some(3479447370796909.0));
        assert_eq!(&standard_hash(3479099956230698.0), b"sqc8b49rny0");
        let d = distance(
            13.361389338970184,
            38.1155563954963,
            15.087267458438873,
            37.50266842333162,
        );
        assert!((d - 166274.1516).abs() < 1e-3);
    }
}
