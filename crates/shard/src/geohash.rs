//! Redis 7.0's geo arithmetic, bit for bit (`src/geohash.c`,
//! `src/geohash_helper.c`, parts of `src/geo.c`): a position is a sorted
//! set score, the 52-bit interleaving of its latitude (-85.05…85.05) and
//! longitude (-180…180) at 26 steps; distances are haversine on Redis's
//! earth radius; a search covers the 3×3 geohash boxes Redis picks for
//! the shape. Hand-written, not a crate: GEOADD's scores, GEOHASH's
//! strings, GEOPOS's coordinates and which members a GEOSEARCH finds must
//! be Redis's exactly, and they follow from these particular roundings.

/// Steps of a stored position (26 × 2 = 52 bits).
pub const STEP_MAX: u8 = 26;
/// Latitudes Redis can index (EPSG:900913).
pub const LAT_MIN: f64 = -85.051_128_78;
/// See [`LAT_MIN`].
pub const LAT_MAX: f64 = 85.051_128_78;
/// Longitudes.
pub const LONG_MIN: f64 = -180.0;
/// See [`LONG_MIN`].
pub const LONG_MAX: f64 = 180.0;
/// Redis's earth radius, in meters.
pub const EARTH_RADIUS: f64 = 6_372_797.560_856;
const MERCATOR_MAX: f64 = 20_037_726.37;
const D_R: f64 = std::f64::consts::PI / 180.0;

/// A geohash of `step` steps (2 × `step` bits); zero bits and step is
/// "none" (a neighbour left out).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Hash {
    /// The interleaved bits.
    pub bits: u64,
    /// Steps.
    pub step: u8,
}

impl Hash {
    fn is_zero(self) -> bool {
        self.bits == 0 && self.step == 0
    }
}

/// A range of one coordinate.
#[derive(Clone, Copy, Debug, Default, PartialEq)]
pub struct Range {
    /// Lower end.
    pub min: f64,
    /// Upper end.
    pub max: f64,
}

/// The area a hash covers.
#[derive(Clone, Copy, Debug, Default, PartialEq)]
pub struct Area {
    /// Its hash.
    pub hash: Hash,
    /// Longitudes covered.
    pub longitude: Range,
    /// Latitudes covered.
    pub latitude: Range,
}

const WGS84: (Range, Range) = (
    Range {
        min: LONG_MIN,
        max: LONG_MAX,
    },
    Range {
        min: LAT_MIN,
        max: LAT_MAX,
    },
);

fn interleave(xlo: u32, ylo: u32) -> u64 {
    const B: [u64; 5] = [
        0x5555_5555_5555_5555,
        0x3333_3333_3333_3333,
        0x0F0F_0F0F_0F0F_0F0F,
        0x00FF_00FF_00FF_00FF,
        0x0000_FFFF_0000_FFFF,
    ];
    const S: [u32; 5] = [1, 2, 4, 8, 16];
    let (mut x, mut y) = (u64::from(xlo), u64::from(ylo));
    for i in (0..5).rev() {
        x = (x | (x << S[i])) & B[i];
        y = (y | (y << S[i])) & B[i];
    }
    x | (y << 1)
}

fn deinterleave(interleaved: u64) -> u64 {
    const B: [u64; 6] = [
        0x5555_5555_5555_5555,
        0x3333_3333_3333_3333,
        0x0F0F_0F0F_0F0F_0F0F,
        0x00FF_00FF_00FF_00FF,
        0x0000_FFFF_0000_FFFF,
        0x0000_0000_FFFF_FFFF,
    ];
    const S: [u32; 6] = [0, 1, 2, 4, 8, 16];
    let (mut x, mut y) = (interleaved, interleaved >> 1);
    for i in 0..6 {
        x = (x | (x >> S[i])) & B[i];
        y = (y | (y >> S[i])) & B[i];
    }
    x | (y << 32)
}

/// `geohashEncode`: None outside the indexable area or the ranges.
pub fn encode(
    long_range: Range,
    lat_range: Range,
    longitude: f64,
    latitude: f64,
    step: u8,
) -> Option<Hash> {
    if step > 32 || step == 0 {
        return None;
    }
    if !(LONG_MIN..=LONG_MAX).contains(&longitude) || !(LAT_MIN..=LAT_MAX).contains(&latitude) {
        return None;
    }
    if latitude < lat_range.min
        || latitude > lat_range.max
        || longitude < long_range.min
        || longitude > long_range.max
    {
        return None;
    }
    let scale = (1u64 << step) as f64;
    let lat_offset = (latitude - lat_range.min) / (lat_range.max - lat_range.min) * scale;
    let long_offset = (longitude - long_range.min) / (long_range.max - long_range.min) * scale;
    Some(Hash {
        bits: interleave(lat_offset as u32, long_offset as u32),
        step,
    })
}

/// [`encode`] on Redis's ranges.
pub fn encode_wgs84(longitude: f64, latitude: f64, step: u8) -> Option<Hash> {
    encode(WGS84.0, WGS84.1, longitude, latitude, step)
}

/// `geohashDecode`.
pub fn decode(long_range: Range, lat_range: Range, hash: Hash) -> Option<Area> {
    if hash.is_zero() {
        return None;
    }
    let sep = deinterleave(hash.bits);
    let lat_scale = lat_range.max - lat_range.min;
    let long_scale = long_range.max - long_range.min;
    let ilato = sep as u32;
    let ilono = (sep >> 32) as u32;
    let div = (1u64 << hash.step) as f64;
    Some(Area {
        hash,
        latitude: Range {
            min: lat_range.min + (f64::from(ilato) / div) * lat_scale,
            max: lat_range.min + ((f64::from(ilato) + 1.0) / div) * lat_scale,
        },
        longitude: Range {
            min: long_range.min + (f64::from(ilono) / div) * long_scale,
            max: long_range.min + ((f64::from(ilono) + 1.0) / div) * long_scale,
        },
    })
}

/// The position a score stands for (`decodeGeohash`): longitude,
/// latitude — the middle of its box, kept inside the indexable area.
pub fn position(score: f64) -> Option<(f64, f64)> {
    let hash = Hash {
        bits: c_u64(score),
        step: STEP_MAX,
    };
    let area = decode(WGS84.0, WGS84.1, hash)?;
    let x = ((area.longitude.min + area.longitude.max) / 2.0).clamp(LONG_MIN, LONG_MAX);
    let y = ((area.latitude.min + area.latitude.max) / 2.0).clamp(LAT_MIN, LAT_MAX);
    Some((x, y))
}

/// A double converted to `uint64_t` as Redis's C does it on x86-64 (gcc's
/// `cvttsd2si` sequence), for a score no GEOADD wrote: below 2^63 the
/// signed conversion (a negative one wraps around; one below -2^63 is
/// 2^63), from 2^63 on the signed conversion of `x - 2^63` with the top
/// bit flipped (2^64 and more give 0). Rust's `as` saturates instead.
fn c_u64(x: f64) -> u64 {
    const TWO63: f64 = 9_223_372_036_854_775_808.0;
    let cvt = |v: f64| -> u64 {
        if v.is_nan() || !(-TWO63..TWO63).contains(&v) {
            1 << 63
        } else {
            v as i64 as u64
        }
    };
    if x < TWO63 {
        cvt(x)
    } else {
        cvt(x - TWO63) ^ (1 << 63)
    }
}

/// A hash's bits aligned to 52 (`geohashAlign52Bits`).
pub fn align52(hash: Hash) -> u64 {
    hash.bits << 52u32.saturating_sub(u32::from(hash.step) * 2)
}

/// The score `GEOADD` stores for a position, or None outside the
/// indexable area.
pub fn score(longitude: f64, latitude: f64) -> Option<f64> {
    encode_wgs84(longitude, latitude, STEP_MAX).map(|h| align52(h) as f64)
}

/// `GEOHASH`'s 11-character string of a score (re-encoded on the
/// standard -90…90 latitude range; the 11th character is always `0`).
pub fn hash_string(score: f64) -> Option<String> {
    const ALPHABET: &[u8; 32] = b"0123456789bcdefghjkmnpqrstuvwxyz";
    let (x, y) = position(score)?;
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
    // Redis ignores a failed re-encode and prints zero bits.
    let bits = encode(std.0, std.1, x, y, 26).map_or(0, |h| h.bits);
    Some(
        (0..11)
            .map(|i| {
                let idx = if i == 10 {
                    0
                } else {
                    ((bits >> (52 - (i + 1) * 5)) & 0x1f) as usize
                };
                char::from(ALPHABET[idx])
            })
            .collect(),
    )
}

fn lat_distance(lat1: f64, lat2: f64) -> f64 {
    EARTH_RADIUS * ((lat2 * D_R) - (lat1 * D_R)).abs()
}

/// Haversine distance in meters (`geohashGetDistance`).
pub fn distance(lon1: f64, lat1: f64, lon2: f64, lat2: f64) -> f64 {
    let (lon1r, lon2r) = (lon1 * D_R, lon2 * D_R);
    let v = ((lon2r - lon1r) / 2.0).sin();
    if v == 0.0 {
        return lat_distance(lat1, lat2);
    }
    let (lat1r, lat2r) = (lat1 * D_R, lat2 * D_R);
    let u = ((lat2r - lat1r) / 2.0).sin();
    let a = u * u + lat1r.cos() * lat2r.cos() * v * v;
    2.0 * EARTH_RADIUS * a.sqrt().asin()
}

/// What a search covers, its sizes in meters (already converted).
#[derive(Clone, Copy, Debug, PartialEq)]
pub enum Shape {
    /// Within `radius` of the centre.
    Circle {
        /// Meters.
        radius: f64,
    },
    /// Within a box centred on the centre.
    Box {
        /// Meters.
        width: f64,
        /// Meters.
        height: f64,
    },
}

/// The distance of a point from the centre when it is within the shape
/// (`geoWithinShape`, given the point's position).
pub fn within(shape: Shape, center: (f64, f64), point: (f64, f64)) -> Option<f64> {
    match shape {
        Shape::Circle { radius } => {
            let d = distance(center.0, center.1, point.0, point.1);
            (d <= radius).then_some(d)
        }
        Shape::Box { width, height } => {
            if lat_distance(point.1, center.1) > height / 2.0 {
                return None;
            }
            if distance(point.0, point.1, center.0, point.1) > width / 2.0 {
                return None;
            }
            Some(distance(center.0, center.1, point.0, point.1))
        }
    }
}

fn steps_by_radius(mut range: f64, lat: f64) -> u8 {
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

fn bounding_box(shape: Shape, center: (f64, f64)) -> [f64; 4] {
    let (longitude, latitude) = center;
    let (height, width) = match shape {
        Shape::Circle { radius } => (radius, radius),
        Shape::Box { width, height } => (height / 2.0, width / 2.0),
    };
    let lat_delta = (height / EARTH_RADIUS) / D_R;
    let long_delta_top = (width / EARTH_RADIUS / ((latitude + lat_delta) * D_R).cos()) / D_R;
    let long_delta_bottom = (width / EARTH_RADIUS / ((latitude - lat_delta) * D_R).cos()) / D_R;
    let south = latitude < 0.0;
    [
        if south {
            longitude - long_delta_bottom
        } else {
            longitude - long_delta_top
        },
        latitude - lat_delta,
        if south {
            longitude + long_delta_bottom
        } else {
            longitude + long_delta_top
        },
        latitude + lat_delta,
    ]
}

/// Moves `hash` one box along the axis whose bits `mask` selects
/// (`0xaaaa…`: longitude, `geohash_move_x`; `0x5555…`: latitude,
/// `geohash_move_y`), east/north for `d > 0`.
fn move_along(hash: &mut Hash, d: i8, mask: u64) {
    // A hash of no steps (a centre outside the indexable area) has no
    // neighbours.
    if d == 0 || hash.step == 0 || hash.step > 32 {
        return;
    }
    let other = !mask;
    let mut a = hash.bits & mask;
    let b = hash.bits & other;
    let shift = 64 - u32::from(hash.step) * 2;
    let zz = other >> shift;
    if d > 0 {
        a = a.wrapping_add(zz + 1);
    } else {
        a |= zz;
        a = a.wrapping_sub(zz + 1);
    }
    a &= mask >> shift;
    hash.bits = a | b;
}

fn moved(hash: Hash, dx: i8, dy: i8) -> Hash {
    let mut h = hash;
    move_along(&mut h, dx, 0xaaaa_aaaa_aaaa_aaaa);
    move_along(&mut h, dy, 0x5555_5555_5555_5555);
    h
}

/// The score ranges `[min, max)` a search of `shape` around `center`
/// (longitude, latitude) reads, in Redis's order — its box, then north,
/// south, east, west, north-east, north-west, south-east, south-west —
/// with the boxes Redis leaves out (outside the bounding box, or the
/// same as the one before) left out
/// (`geohashCalculateAreasByShapeWGS84`, `membersOfAllNeighbors`).
pub fn search_ranges(shape: Shape, center: (f64, f64)) -> Vec<(u64, u64)> {
    let [min_lon, min_lat, max_lon, max_lat] = bounding_box(shape, center);
    let radius = match shape {
        Shape::Circle { radius } => radius,
        Shape::Box { width, height } => {
            ((width / 2.0) * (width / 2.0) + (height / 2.0) * (height / 2.0)).sqrt()
        }
    };
    let mut steps = steps_by_radius(radius, center.1);
    let around = |steps: u8| {
        let hash = encode_wgs84(center.0, center.1, steps).unwrap_or_default();
        let n = [
            moved(hash, 0, 1),
            moved(hash, 0, -1),
            moved(hash, 1, 0),
            moved(hash, -1, 0),
            moved(hash, 1, 1),
            moved(hash, -1, 1),
            moved(hash, 1, -1),
            moved(hash, -1, -1),
        ];
        (hash, n)
    };
    let (mut hash, mut n) = around(steps);
    let area_of = |h: Hash| decode(WGS84.0, WGS84.1, h).unwrap_or_default();
    let decrease = area_of(n[0]).latitude.max < max_lat
        || area_of(n[1]).latitude.min > min_lat
        || area_of(n[2]).longitude.max < max_lon
        || area_of(n[3]).longitude.min > min_lon;
    if steps > 1 && decrease {
        steps -= 1;
        (hash, n) = around(steps);
    }
    let area = area_of(hash);
    if steps >= 2 {
        let zero = Hash::default();
        // north 0, south 1, east 2, west 3, ne 4, nw 5, se 6, sw 7
        if area.latitude.min < min_lat {
            (n[1], n[7], n[6]) = (zero, zero, zero);
        }
        if area.latitude.max > max_lat {
            (n[0], n[4], n[5]) = (zero, zero, zero);
        }
        if area.longitude.min < min_lon {
            (n[3], n[7], n[5]) = (zero, zero, zero);
        }
        if area.longitude.max > max_lon {
            (n[2], n[6], n[4]) = (zero, zero, zero);
        }
    }
    let boxes = std::iter::once(hash).chain(n);
    let mut out = Vec::new();
    // Redis skips a box equal to the last one it read — unless that was
    // its own box (index 0 reads as "none yet").
    let mut last = (0usize, Hash::default());
    for (i, b) in boxes.enumerate() {
        if b.is_zero() {
            continue;
        }
        if last.0 > 0 && last.1 == b {
            continue;
        }
        let min = align52(b);
        let max = align52(Hash {
            bits: b.bits + 1,
            step: b.step,
        });
        out.push((min, max));
        last = (i, b);
    }
    out
}

#[cfg(test)]
#[path = "geohash_tests.rs"]
mod tests;
