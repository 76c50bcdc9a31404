//! What redis-server 7.0.15 answered for the same points
//! (`geohash_data/redis.tsv`, made by a script against it): 1 805 points
//! (random over the indexable area, a dense cluster, the corners) with
//! their `ZSCORE` after `GEOADD`, `GEOHASH` and `GEOPOS`; `GEOSEARCH …
//! ASC WITHDIST` by radius and by box around nine centres (the
//! antimeridian, near the poles, a zero radius); four `GEODIST`s.

use super::*;

struct Point {
    member: String,
    lon: f64,
    lat: f64,
    score: f64,
    hash: String,
    pos: (f64, f64),
}

fn data() -> (Vec<Point>, Vec<Vec<String>>, Vec<f64>) {
    let text = include_str!("geohash_data/redis.tsv");
    let (mut points, mut queries, mut dists) = (Vec::new(), Vec::new(), Vec::new());
    for line in text.lines() {
        let f: Vec<&str> = line.split('\t').collect();
        match f[0] {
            "P" => points.push(Point {
                member: f[1].to_string(),
                lon: f[2].parse().unwrap(),
                lat: f[3].parse().unwrap(),
                score: f[4].parse().unwrap(),
                hash: f[5].to_string(),
                pos: (f[6].parse().unwrap(), f[7].parse().unwrap()),
            }),
            "Q" => queries.push(f[1..].iter().map(|s| s.to_string()).collect()),
            "D" => dists = f[1].split(' ').map(|d| d.parse().unwrap()).collect(),
            _ => panic!("bad line {line}"),
        }
    }
    (points, queries, dists)
}

#[test]
fn geoadd_scores_geohash_and_geopos_are_redis_s() {
    let (points, _, _) = data();
    for p in &points {
        let s = score(p.lon, p.lat).expect("indexable");
        assert_eq!(s, p.score, "score of {}", p.member);
        assert_eq!(hash_string(s).unwrap(), p.hash, "GEOHASH of {}", p.member);
        // GEOPOS prints `%.17Lf` (17 decimals, not 17 digits: a longitude
        // near 0 loses its last bits in the reply), which the fixture's
        // script parsed back to the nearest double.
        let (x, y) = position(s).unwrap();
        let printed = |v: f64| format!("{v:.17}").parse::<f64>().unwrap();
        assert_eq!((printed(x), printed(y)), p.pos, "GEOPOS of {}", p.member);
    }
    assert_eq!(score(0.0, 85.06), None);
    assert_eq!(score(180.1, 0.0), None);
}

#[test]
fn geodist_is_redis_s() {
    let (points, _, dists) = data();
    let at = |m: &str| {
        let p = points.iter().find(|p| p.member == m).unwrap();
        position(p.score).unwrap()
    };
    let d = |a: &str, b: &str, unit: f64| {
        let (x, y) = (at(a), at(b));
        let v: f64 = format!("{:.4}", distance(x.0, x.1, y.0, y.1) / unit)
            .parse()
            .unwrap();
        v
    };
    assert_eq!(d("palermo", "catania", 1.0), dists[0]);
    assert_eq!(d("palermo", "catania", 1000.0), dists[1]);
    assert_eq!(d("edge1", "edge2", 1609.34), dists[2]);
    assert_eq!(d("p1", "p2", 0.3048), dists[3]);
}

#[test]
fn geosearch_finds_what_redis_finds_at_the_same_distances() {
    let (points, queries, _) = data();
    for q in &queries {
        let (lon, lat): (f64, f64) = (q[0].parse().unwrap(), q[1].parse().unwrap());
        let shape = if q[2] == "r" {
            Shape::Circle {
                radius: q[3].parse().unwrap(),
            }
        } else {
            let (w, h) = q[3].split_once(',').unwrap();
            Shape::Box {
                width: w.parse().unwrap(),
                height: h.parse().unwrap(),
            }
        };
        let mut ours: Vec<(String, f64)> = Vec::new();
        for (min, max) in search_ranges(shape, (lon, lat)) {
            for p in &points {
                if p.score >= min as f64 && p.score < max as f64 {
                    let xy = position(p.score).unwrap();
                    if let Some(d) = within(shape, (lon, lat), xy) {
                        let d: f64 = format!("{d:.4}").parse().unwrap();
                        ours.push((p.member.clone(), d));
                    }
                }
            }
        }
        let mut redis: Vec<(String, f64)> = q
            .get(4)
            .map(|r| {
                r.split(' ')
                    .filter(|s| !s.is_empty())
                    .map(|md| {
                        let (m, d) = md.split_once(':').unwrap();
                        (m.to_string(), d.parse().unwrap())
                    })
                    .collect()
            })
            .unwrap_or_default();
        ours.sort_by(|a, b| a.0.cmp(&b.0));
        redis.sort_by(|a, b| a.0.cmp(&b.0));
        assert_eq!(
            ours, redis,
            "GEOSEARCH around {lon},{lat} {} {}",
            q[2], q[3]
        );
    }
}

#[test]
fn a_centre_outside_the_indexable_area_searches_nothing_and_does_not_panic() {
    for centre in [(0.0, 89.0), (181.0, 0.0), (f64::NAN, 0.0)] {
        let ranges = search_ranges(Shape::Circle { radius: 1000.0 }, centre);
        assert!(
            ranges.iter().all(|&(min, max)| min <= max),
            "{centre:?}: {ranges:?}"
        );
    }
    assert_eq!(position(f64::NAN).map(|_| ()), position(0.0).map(|_| ()));
}
