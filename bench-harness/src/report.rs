//! Results: one row per point, written as CSV (appended, one file per results directory),
//! JSON and a markdown table; the summary of a directory (every label side by side, the
//! ringkeeper/ZooKeeper ratio per point) and its charts as SVG and PNG, drawn by plotters.
//! Rules: numbers come only from measured rows; a row's fields are fixed (`CSV_HEADER`); a
//! directory's CSV may hold runs of several servers, told apart by their label, which names
//! the server and the setup as `<server>-<setup>` (`ringkeeper-standalone`,
//! `zookeeper-ensemble3`, `ceiling-standalone`).

use crate::load::PointResult;
use plotters::coord::Shift;
use plotters::prelude::*;
use std::collections::{BTreeMap, BTreeSet};
use std::fmt::Write as _;
use std::path::Path;
use std::sync::OnceLock;

pub const CSV_HEADER: &str = "label,workload,read_pct,clients,outstanding,payload_bytes,seconds,ops_per_s,\
                              p50_ms,p90_ms,p99_ms,p999_ms,max_ms,errors,events_per_s,reconnects,target_rate,\
                              conn_p99_median_ms,conn_p99_worst_ms,conn_p99_spread,host_steal_per_s";
/// Columns of a results.csv written before the fairness columns (still read).
const CSV_COLUMNS_OLD: usize = 17;
/// Columns of one written before the steal column (still read).
const CSV_COLUMNS_FAIRNESS: usize = 20;
const CSV_COLUMNS: usize = 21;
/// A window in which the hypervisor stole more than this many CPU-seconds per second (all
/// CPUs together) measured the host as much as the server: the open-loop tables mark it, and
/// count the factor again without such points. Steal comes in bursts (up to 1 s per second
/// was seen on this rig), so a 10 s window over this mark lost a fifth of a second or more.
pub const STEAL_PERTURBED_PER_S: f64 = 0.02;

#[derive(Debug, Clone, PartialEq)]
pub struct Row {
    pub label: String,
    pub workload: String,
    pub read_pct: f64,
    pub clients: usize,
    pub outstanding: usize,
    pub payload_bytes: usize,
    pub seconds: f64,
    pub ops_per_s: f64,
    pub p50_ms: f64,
    pub p90_ms: f64,
    pub p99_ms: f64,
    pub p999_ms: f64,
    pub max_ms: f64,
    pub errors: u64,
    pub events_per_s: f64,
    pub reconnects: u64,
    /// Open-loop rate asked for, ops/s (0: closed loop).
    pub target_rate: f64,
    /// Fairness: the median connection's p99, the worst connection's p99, and worst over
    /// median (0 when not measured: an older row, or no connection completed a request).
    pub conn_p99_median_ms: f64,
    pub conn_p99_worst_ms: f64,
    pub conn_p99_spread: f64,
    /// CPU-seconds per second stolen from the machine during the window (`host_cpu`); None
    /// where unknown (not measured, or a row written before the column).
    pub host_steal_per_s: Option<f64>,
}

impl Row {
    #[allow(clippy::too_many_arguments)]
    pub fn from_result(
        label: &str,
        workload: &str,
        read_pct: f64,
        clients: usize,
        outstanding: usize,
        payload_bytes: usize,
        target_rate: f64,
        r: &PointResult,
    ) -> Row {
        let ms = |q: f64| r.latency_us.value_at_quantile(q) as f64 / 1000.0;
        let secs = r.seconds.max(1e-9);
        let (median_us, worst_us) = r.fairness().unwrap_or((0, 0));
        Row {
            label: label.to_string(),
            workload: workload.to_string(),
            read_pct,
            clients,
            outstanding,
            payload_bytes,
            seconds: r.seconds,
            ops_per_s: r.completed as f64 / secs,
            p50_ms: ms(0.5),
            p90_ms: ms(0.9),
            p99_ms: ms(0.99),
            p999_ms: ms(0.999),
            max_ms: r.latency_us.max() as f64 / 1000.0,
            errors: r.error_count(),
            events_per_s: r.events as f64 / secs,
            reconnects: r.reconnects,
            target_rate,
            conn_p99_median_ms: median_us as f64 / 1000.0,
            conn_p99_worst_ms: worst_us as f64 / 1000.0,
            conn_p99_spread: if median_us > 0 { worst_us as f64 / median_us as f64 } else { 0.0 },
            host_steal_per_s: r.host_steal_per_s,
        }
    }

    /// (column, value, is text) in `CSV_HEADER`'s order.
    fn fields(&self) -> [(&'static str, String, bool); CSV_COLUMNS] {
        [
            ("label", self.label.clone(), true),
            ("workload", self.workload.clone(), true),
            ("read_pct", self.read_pct.to_string(), false),
            ("clients", self.clients.to_string(), false),
            ("outstanding", self.outstanding.to_string(), false),
            ("payload_bytes", self.payload_bytes.to_string(), false),
            ("seconds", format!("{:.3}", self.seconds), false),
            ("ops_per_s", format!("{:.1}", self.ops_per_s), false),
            ("p50_ms", format!("{:.3}", self.p50_ms), false),
            ("p90_ms", format!("{:.3}", self.p90_ms), false),
            ("p99_ms", format!("{:.3}", self.p99_ms), false),
            ("p999_ms", format!("{:.3}", self.p999_ms), false),
            ("max_ms", format!("{:.3}", self.max_ms), false),
            ("errors", self.errors.to_string(), false),
            ("events_per_s", format!("{:.1}", self.events_per_s), false),
            ("reconnects", self.reconnects.to_string(), false),
            ("target_rate", format!("{:.0}", self.target_rate), false),
            ("conn_p99_median_ms", format!("{:.3}", self.conn_p99_median_ms), false),
            ("conn_p99_worst_ms", format!("{:.3}", self.conn_p99_worst_ms), false),
            ("conn_p99_spread", format!("{:.2}", self.conn_p99_spread), false),
            ("host_steal_per_s", self.host_steal_per_s.map_or(String::new(), |v| format!("{v:.4}")), false),
        ]
    }

    pub fn csv(&self) -> String {
        self.fields().map(|(_, v, _)| v).join(",")
    }

    pub fn parse_csv(line: &str) -> Option<Row> {
        let f: Vec<&str> = line.trim().split(',').collect();
        if ![CSV_COLUMNS, CSV_COLUMNS_FAIRNESS, CSV_COLUMNS_OLD].contains(&f.len()) {
            return None;
        }
        let n = |i: usize| f[i].parse::<f64>().ok();
        // A row written before the fairness columns has none: 0 (not measured).
        let n_or_0 = |i: usize| if i < f.len() { n(i) } else { Some(0.0) };
        Some(Row {
            label: f[0].to_string(),
            workload: f[1].to_string(),
            read_pct: n(2)?,
            clients: f[3].parse().ok()?,
            outstanding: f[4].parse().ok()?,
            payload_bytes: f[5].parse().ok()?,
            seconds: n(6)?,
            ops_per_s: n(7)?,
            p50_ms: n(8)?,
            p90_ms: n(9)?,
            p99_ms: n(10)?,
            p999_ms: n(11)?,
            max_ms: n(12)?,
            errors: f[13].parse().ok()?,
            events_per_s: n(14)?,
            reconnects: f[15].parse().ok()?,
            target_rate: n(16)?,
            conn_p99_median_ms: n_or_0(17)?,
            conn_p99_worst_ms: n_or_0(18)?,
            conn_p99_spread: n_or_0(19)?,
            // Empty or missing: unknown.
            host_steal_per_s: f.get(20).filter(|v| !v.is_empty()).map(|v| v.parse::<f64>()).transpose().ok()?,
        })
    }

    /// One JSON object: text fields as strings, the rest as the numbers they print as.
    pub fn json(&self) -> String {
        let mut row = serde_json::Map::new();
        for (k, v, text) in self.fields() {
            let value = if text {
                serde_json::Value::String(v)
            } else if v.is_empty() {
                serde_json::Value::Null // unknown
            } else {
                // Numbers print as they do in the CSV (a non-number would be a bug: kept as text).
                serde_json::from_str(&v).unwrap_or(serde_json::Value::String(v))
            };
            row.insert(k.to_string(), value);
        }
        serde_json::Value::Object(row).to_string()
    }
}

pub fn markdown(rows: &[Row]) -> String {
    let mut out = String::from(
        "| label | workload | read % | ops/s | p50 ms | p90 ms | p99 ms | p99.9 ms | max ms | errors \
         | conn p99 median ms | conn p99 worst ms | worst/median |\n\
         | --- | --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: |\n",
    );
    for r in rows {
        let _ = writeln!(
            out,
            "| {} | {} | {} | {:.0} | {:.2} | {:.2} | {:.2} | {:.2} | {:.2} | {} | {:.2} | {:.2} | {:.2} |",
            r.label,
            r.workload,
            r.read_pct,
            r.ops_per_s,
            r.p50_ms,
            r.p90_ms,
            r.p99_ms,
            r.p999_ms,
            r.max_ms,
            r.errors,
            r.conn_p99_median_ms,
            r.conn_p99_worst_ms,
            r.conn_p99_spread
        );
    }
    out
}

/// Appends `rows` to `dir/results.csv` (with the header if the file is new) and writes
/// `dir/<label>.json` and `dir/<label>.md`.
pub fn write_run(dir: &Path, label: &str, rows: &[Row]) -> std::io::Result<()> {
    use std::io::Write;
    std::fs::create_dir_all(dir)?;
    let csv = dir.join("results.csv");
    let new = !csv.exists();
    let mut f = std::fs::OpenOptions::new().create(true).append(true).open(&csv)?;
    if new {
        writeln!(f, "{CSV_HEADER}")?;
    }
    for r in rows {
        writeln!(f, "{}", r.csv())?;
    }
    let json: Vec<String> = rows.iter().map(|r| r.json()).collect();
    std::fs::write(dir.join(format!("{label}.json")), format!("[\n{}\n]\n", json.join(",\n")))?;
    std::fs::write(dir.join(format!("{label}.md")), markdown(rows))
}

pub fn read_rows(dir: &Path) -> std::io::Result<Vec<Row>> {
    let text = std::fs::read_to_string(dir.join("results.csv"))?;
    Ok(text.lines().skip(1).filter_map(Row::parse_csv).collect())
}

/// `(server, setup)` of a label `<server>-<setup>`.
fn split_label(label: &str) -> (&str, &str) {
    label.split_once('-').unwrap_or((label, ""))
}

/// The summary of a directory: throughput per label and read share, the ringkeeper/ZooKeeper
/// ratio per setup, and p99 latencies.
pub fn summary(all: &[Row], workload: &str) -> String {
    let rows: Vec<&Row> = all.iter().filter(|r| r.workload == workload && r.target_rate == 0.0).collect();
    let labels: BTreeSet<&str> = rows.iter().map(|r| r.label.as_str()).collect();
    let ratios: BTreeSet<u64> = rows.iter().map(|r| (r.read_pct * 10.0).round() as u64).collect();
    let at =
        |label: &str, ratio: u64| rows.iter().find(|r| r.label == label && (r.read_pct * 10.0).round() as u64 == ratio);
    let setups: BTreeSet<&str> = labels.iter().map(|l| split_label(l).1).collect();
    let pairs: Vec<&str> = setups
        .into_iter()
        .filter(|s| {
            labels.contains(format!("ringkeeper-{s}").as_str()) && labels.contains(format!("zookeeper-{s}").as_str())
        })
        .collect();
    let cell = |r: Option<&&Row>, f: &dyn Fn(&Row) -> String| r.map_or("–".to_string(), |r| f(r));
    let mut header: Vec<String> = labels.iter().map(|l| l.to_string()).collect();
    header.extend(pairs.iter().map(|s| format!("ratio {s}")));
    let throughput: Vec<Vec<String>> = ratios
        .iter()
        .map(|&ratio| {
            let mut line: Vec<String> =
                labels.iter().map(|l| cell(at(l, ratio), &|r| format!("{:.0}", r.ops_per_s))).collect();
            line.extend(pairs.iter().map(|s| {
                match (at(&format!("ringkeeper-{s}"), ratio), at(&format!("zookeeper-{s}"), ratio)) {
                    (Some(a), Some(b)) if b.ops_per_s > 0.0 => format!("{:.2}×", a.ops_per_s / b.ops_per_s),
                    _ => "–".to_string(),
                }
            }));
            line
        })
        .collect();
    let p99: Vec<Vec<String>> = ratios
        .iter()
        .map(|&ratio| labels.iter().map(|l| cell(at(l, ratio), &|r| format!("{:.2}", r.p99_ms))).collect())
        .collect();
    let labels_only: Vec<String> = labels.iter().map(|l| l.to_string()).collect();
    let errors: u64 = all.iter().filter(|r| r.workload == workload).map(|r| r.errors).sum();
    format!(
        "### Throughput, ops/s ({workload})\n\n{}\n### p99 latency, ms ({workload})\n\n{}\n{}Errors over all points: {errors}.\n",
        table(&header, &ratios, &throughput),
        table(&labels_only, &ratios, &p99),
        open_loop_summary(all, workload)
    )
}

/// p50 and p99 of each server at the same open-loop rates (shares of ZooKeeper's saturation,
/// when the script asks for them), paired by setup, read share and rate, with ZooKeeper's
/// figure over ringkeeper's. Where the run also measured `floor-<setup>` (canned-reply
/// responders in the members' places, the same load), each point shows that floor too, and the
/// table ends with how many points reach the factor `OPEN_LOOP_FACTOR`, at how many
/// ZooKeeper's figure over that factor is below the floor measured there, and at how many
/// ringkeeper itself measured below it (`OpenLoopTally`).
fn open_loop_summary(all: &[Row], workload: &str) -> String {
    let rows: Vec<&Row> = all.iter().filter(|r| r.workload == workload && r.target_rate > 0.0).collect();
    let setups: BTreeSet<&str> = rows.iter().map(|r| split_label(&r.label).1).collect();
    let per_mille = |r: &Row| (r.read_pct * 10.0).round() as u64;
    let mut out = String::new();
    for setup in setups {
        let (rk, zk, floor) = (format!("ringkeeper-{setup}"), format!("zookeeper-{setup}"), format!("floor-{setup}"));
        // (read share per mille, rate ops/s): both servers ran each point at the same rate.
        let points: BTreeSet<(u64, u64)> = rows
            .iter()
            .filter(|r| split_label(&r.label).1 == setup)
            .map(|r| (per_mille(r), r.target_rate.round() as u64))
            .collect();
        let at = |label: &str, (ratio, rate): (u64, u64)| {
            rows.iter().find(|r| r.label == label && per_mille(r) == ratio && r.target_rate.round() as u64 == rate)
        };
        let saturation = |ratio: u64| {
            all.iter()
                .find(|r| r.workload == workload && r.label == zk && r.target_rate == 0.0 && per_mille(r) == ratio)
                .map(|r| r.ops_per_s)
        };
        let with_floor = rows.iter().any(|r| r.label == floor);
        let (floor_head, floor_rule) =
            if with_floor { (format!(" {floor} p50 / p99 ms |"), " ---: |") } else { (String::new(), "") };
        let with_steal = rows.iter().any(|r| split_label(&r.label).1 == setup && r.host_steal_per_s.is_some());
        let (steal_head, steal_rule) = if with_steal {
            (" host steal ringkeeper / zookeeper, CPU-s/s |".to_string(), " ---: |")
        } else {
            (String::new(), "")
        };
        let _ = writeln!(
            out,
            "### Latency at a fixed open-loop rate, {setup} ({workload})\n\n\
             | read % | share of {zk}'s saturation | rate ops/s | {rk} p50 / p99 ms | {zk} p50 / p99 ms |{floor_head} \
             zookeeper / ringkeeper p50, p99 |{steal_head}\n| ---: | ---: | ---: | ---: | ---: |{floor_rule} ---: |{steal_rule}"
        );
        let mut tally = OpenLoopTally::default();
        for point in points {
            let (a, b, f) = (at(&rk, point), at(&zk, point), at(&floor, point));
            let share = saturation(point.0)
                .filter(|s| *s > 0.0)
                .map_or("–".to_string(), |s| format!("{:.0}%", point.1 as f64 / s * 100.0));
            let p = |r: Option<&&Row>| r.map_or("–".to_string(), |r| format!("{:.2} / {:.2}", r.p50_ms, r.p99_ms));
            let ratio_cell = match (a, b) {
                (Some(a), Some(b)) if a.p50_ms > 0.0 && a.p99_ms > 0.0 => {
                    format!("{:.1}×, {:.1}×", b.p50_ms / a.p50_ms, b.p99_ms / a.p99_ms)
                }
                _ => "–".to_string(),
            };
            if let (Some(a), Some(b)) = (a, b) {
                tally.count(a, b, f.copied());
            }
            let floor_cell = if with_floor { format!(" {} |", p(f)) } else { String::new() };
            let steal_cell = if with_steal {
                let one = |r: Option<&&Row>| match r.and_then(|r| r.host_steal_per_s) {
                    None => "?".to_string(),
                    Some(v) if v > STEAL_PERTURBED_PER_S => format!("**{v:.3}**"),
                    Some(v) => format!("{v:.3}"),
                };
                format!(" {} / {} |", one(a), one(b))
            } else {
                String::new()
            };
            let _ = writeln!(
                out,
                "| {} | {share} | {} | {} | {} |{floor_cell} {ratio_cell} |{steal_cell}",
                point.0 as f64 / 10.0,
                point.1,
                p(a),
                p(b)
            );
        }
        out.push('\n');
        if tally.points > 0 {
            let _ = writeln!(out, "{}\n", tally.describe(with_floor));
        }
    }
    out
}

/// The factor by which ringkeeper's open-loop p50 and p99 should be below ZooKeeper's (issue 17).
const OPEN_LOOP_FACTOR: f64 = 2.0;

/// Counts of one setup's open-loop points with both servers measured (a row that completed
/// nothing, p50 0, counts nowhere).
#[derive(Debug, Default)]
struct OpenLoopTally {
    points: usize,
    /// ringkeeper's p50 and p99 both at most ZooKeeper's / `OPEN_LOOP_FACTOR`.
    both_met: usize,
    /// Points with a floor measured.
    floored: usize,
    /// ZooKeeper's p50 / `OPEN_LOOP_FACTOR` below the floor's p50 as measured at that point.
    p50_below_floor: usize,
    /// The same for p99.
    p99_below_floor: usize,
    /// Either of the two.
    either_below_floor: usize,
    /// ringkeeper's own p50 or p99 below the floor's: the floor is one window on a shared
    /// machine, a noisy bound.
    rk_below_floor: usize,
    /// Points where either server's window had steal measured.
    steal_known: usize,
    /// Points where either server's window lost more than `STEAL_PERTURBED_PER_S` to steal.
    perturbed: usize,
    /// `both_met` among the points with both servers' steal measured and neither perturbed.
    both_met_calm: usize,
    /// Points with both servers' steal measured and neither perturbed.
    calm: usize,
}

/// A row that measured something.
fn measured(r: &Row) -> bool {
    r.ops_per_s > 0.0 && r.p50_ms > 0.0 && r.p99_ms > 0.0
}

impl OpenLoopTally {
    fn count(&mut self, rk: &Row, zk: &Row, floor: Option<&Row>) {
        if !measured(rk) || !measured(zk) {
            return;
        }
        self.points += 1;
        let met = rk.p50_ms * OPEN_LOOP_FACTOR <= zk.p50_ms && rk.p99_ms * OPEN_LOOP_FACTOR <= zk.p99_ms;
        self.both_met += usize::from(met);
        let steals = [rk.host_steal_per_s, zk.host_steal_per_s];
        if steals.iter().any(Option::is_some) {
            self.steal_known += 1;
            if steals.iter().flatten().any(|v| *v > STEAL_PERTURBED_PER_S) {
                self.perturbed += 1;
            } else if steals.iter().all(Option::is_some) {
                self.calm += 1;
                self.both_met_calm += usize::from(met);
            }
        }
        if let Some(f) = floor.filter(|f| measured(f)) {
            self.floored += 1;
            let p50 = zk.p50_ms < f.p50_ms * OPEN_LOOP_FACTOR;
            let p99 = zk.p99_ms < f.p99_ms * OPEN_LOOP_FACTOR;
            self.p50_below_floor += usize::from(p50);
            self.p99_below_floor += usize::from(p99);
            self.either_below_floor += usize::from(p50 || p99);
            self.rk_below_floor += usize::from(rk.p50_ms < f.p50_ms || rk.p99_ms < f.p99_ms);
        }
    }

    fn describe(&self, with_floor: bool) -> String {
        let mut s = format!(
            "ringkeeper's p50 and p99 are both at most 1/{OPEN_LOOP_FACTOR} of ZooKeeper's at {} of {} points.",
            self.both_met, self.points
        );
        if with_floor {
            let _ = write!(
                s,
                " 1/{OPEN_LOOP_FACTOR} of ZooKeeper's figure is below the floor measured at that point (canned \
                 replies, same load and network, one window) at {} of {} points: p50 at {}, p99 at {}. ringkeeper \
                 itself measured below the floor, in p50 or p99, at {} (the floor is a noisy bound).",
                self.either_below_floor, self.floored, self.p50_below_floor, self.p99_below_floor, self.rk_below_floor
            );
        }
        if self.steal_known > 0 {
            let _ = write!(
                s,
                " The host stole more than {STEAL_PERTURBED_PER_S} CPU-s/s during either server's window (in bold) \
                 at {} of {} points with steal measured; at the {} points where neither server's window lost that \
                 much, both are at most 1/{OPEN_LOOP_FACTOR} of ZooKeeper's at {}.",
                self.perturbed, self.steal_known, self.calm, self.both_met_calm
            );
        }
        s
    }
}

/// A markdown table: a "read %" column, then `header`'s, one line per ratio (per mille).
fn table(header: &[String], ratios: &BTreeSet<u64>, lines: &[Vec<String>]) -> String {
    let mut out = format!("| read % | {} |\n| ---: |{}\n", header.join(" | "), " ---: |".repeat(header.len()));
    for (ratio, line) in ratios.iter().zip(lines) {
        let _ = writeln!(out, "| {} | {} |", *ratio as f64 / 10.0, line.join(" | "));
    }
    out
}

/// Line colours, one per label in label order (matplotlib's first eight).
const PALETTE: [RGBColor; 8] = [
    RGBColor(0x1f, 0x77, 0xb4),
    RGBColor(0xd6, 0x27, 0x28),
    RGBColor(0x2c, 0xa0, 0x2c),
    RGBColor(0xff, 0x7f, 0x0e),
    RGBColor(0x94, 0x67, 0xbd),
    RGBColor(0x8c, 0x56, 0x4b),
    RGBColor(0xe3, 0x77, 0xc2),
    RGBColor(0x7f, 0x7f, 0x7f),
];
/// A chart's size in pixels (SVG user units).
pub const CHART_WIDTH_PX: u32 = 760;
pub const CHART_HEIGHT_PX: u32 = 440;
/// Where the TTF font for chart text is looked for, in order (Debian: fonts-dejavu-core,
/// fonts-liberation). plotters lays text out with it for both SVG and PNG.
pub const CHART_FONT_PATHS: &[&str] = &[
    "/usr/share/fonts/truetype/dejavu/DejaVuSans.ttf",
    "/usr/share/fonts/truetype/liberation/LiberationSans-Regular.ttf",
    "/usr/share/fonts/dejavu/DejaVuSans.ttf",
];

/// Why a chart was not drawn.
#[derive(Debug)]
pub enum ChartError {
    /// None of `CHART_FONT_PATHS` is a readable TTF font.
    NoFont,
    /// plotters could not draw or write it.
    Draw(String),
}

impl std::fmt::Display for ChartError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            ChartError::NoFont => write!(
                f,
                "charts need a TTF font and none of {} is one (Debian: apt-get install fonts-dejavu-core)",
                CHART_FONT_PATHS.join(", ")
            ),
            ChartError::Draw(e) => write!(f, "drawing the chart: {e}"),
        }
    }
}

impl std::error::Error for ChartError {}

/// Registers the first font of `CHART_FONT_PATHS` as plotters' "sans-serif", once per process
/// (plotters keeps it for the process's life, so its bytes are leaked once).
fn ensure_font() -> Result<(), ChartError> {
    static FONT: OnceLock<bool> = OnceLock::new();
    let found = *FONT.get_or_init(|| {
        CHART_FONT_PATHS.iter().any(|p| match std::fs::read(p) {
            Ok(bytes) => {
                let bytes: &'static [u8] = Box::leak(bytes.into_boxed_slice());
                plotters::style::register_font("sans-serif", FontStyle::Normal, bytes).is_ok()
            }
            Err(_) => false,
        })
    });
    if found {
        Ok(())
    } else {
        Err(ChartError::NoFont)
    }
}

/// What a chart shows: one line per label of `(read share, value)` points, sorted by share,
/// and the top of the y axis.
struct Lines {
    lines: Vec<(String, Vec<(f64, f64)>)>,
    y_max: f64,
}

fn lines(rows: &[Row], workload: &str, value: fn(&Row) -> f64) -> Lines {
    let rows: Vec<&Row> = rows.iter().filter(|r| r.workload == workload && r.target_rate == 0.0).collect();
    let mut by_label: BTreeMap<&str, Vec<(f64, f64)>> = BTreeMap::new();
    for r in &rows {
        by_label.entry(r.label.as_str()).or_default().push((r.read_pct, value(r)));
    }
    let lines = by_label
        .into_iter()
        .map(|(label, mut pts)| {
            pts.sort_by(|a, b| a.0.total_cmp(&b.0));
            (label.to_string(), pts)
        })
        .collect();
    let y_max = rows.iter().map(|r| value(r)).fold(0.0f64, f64::max).max(1e-9) * 1.1;
    Lines { lines, y_max }
}

/// Draws the line chart on any plotters backend (SVG or bitmap).
fn draw<DB: DrawingBackend>(
    root: DrawingArea<DB, Shift>,
    data: &Lines,
    title: &str,
    y_label: &str,
) -> Result<(), ChartError> {
    let err = |e: DrawingAreaErrorKind<DB::ErrorType>| ChartError::Draw(e.to_string());
    root.fill(&WHITE).map_err(err)?;
    let y_max = data.y_max;
    let mut chart = ChartBuilder::on(&root)
        .caption(title, ("sans-serif", 18))
        .margin(14)
        .x_label_area_size(42)
        .y_label_area_size(78)
        .build_cartesian_2d(0f64..100f64, 0f64..y_max)
        .map_err(err)?;
    let y_format = |v: &f64| if y_max >= 100.0 { format!("{v:.0}") } else { format!("{v:.2}") };
    chart
        .configure_mesh()
        .x_labels(11)
        .y_labels(6)
        .x_label_formatter(&|v| format!("{v:.0}"))
        .y_label_formatter(&y_format)
        .x_desc("read share, %")
        .y_desc(y_label)
        .light_line_style(WHITE)
        .draw()
        .map_err(err)?;
    for (i, (label, pts)) in data.lines.iter().enumerate() {
        let color = PALETTE[i % PALETTE.len()];
        chart
            .draw_series(LineSeries::new(pts.iter().copied(), color.stroke_width(2)))
            .map_err(err)?
            .label(label.as_str())
            .legend(move |(x, y)| PathElement::new(vec![(x, y), (x + 20, y)], color.stroke_width(3)));
        chart.draw_series(pts.iter().map(|&p| Circle::new(p, 3, color.filled()))).map_err(err)?;
    }
    chart
        .configure_series_labels()
        .position(SeriesLabelPosition::UpperLeft)
        .background_style(WHITE.mix(0.85))
        .border_style(BLACK.mix(0.4))
        .draw()
        .map_err(err)?;
    root.present().map_err(err)
}

/// A line chart of `value` against the read share, one line per label, as SVG.
pub fn svg_chart(
    rows: &[Row],
    workload: &str,
    title: &str,
    y_label: &str,
    value: fn(&Row) -> f64,
) -> Result<String, ChartError> {
    ensure_font()?;
    let data = lines(rows, workload, value);
    let mut out = String::new();
    draw(
        SVGBackend::with_string(&mut out, (CHART_WIDTH_PX, CHART_HEIGHT_PX)).into_drawing_area(),
        &data,
        title,
        y_label,
    )?;
    if !out.ends_with('\n') {
        out.push('\n');
    }
    Ok(out)
}

/// The same chart as a PNG file at `path`.
pub fn png_chart(
    path: &Path,
    rows: &[Row],
    workload: &str,
    title: &str,
    y_label: &str,
    value: fn(&Row) -> f64,
) -> Result<(), ChartError> {
    ensure_font()?;
    let data = lines(rows, workload, value);
    draw(BitMapBackend::new(path, (CHART_WIDTH_PX, CHART_HEIGHT_PX)).into_drawing_area(), &data, title, y_label)
}

/// The charts `write_summary` draws: file stem, title, y axis, value.
type ChartSpec = (&'static str, &'static str, &'static str, fn(&Row) -> f64);
const CHARTS: [ChartSpec; 2] = [
    ("throughput", "Throughput", "operations per second", |r| r.ops_per_s),
    ("latency-p99", "p99 latency", "ms", |r| r.p99_ms),
];

/// Writes `summary.md`, and `throughput` and `latency-p99` charts as `.svg` and `.png`, for
/// `workload` in `dir`.
pub fn write_summary(dir: &Path, workload: &str, preamble: &str) -> std::io::Result<String> {
    let rows = read_rows(dir)?;
    let text = format!("{preamble}{}", summary(&rows, workload));
    std::fs::write(dir.join("summary.md"), &text)?;
    for (stem, title, y_label, value) in CHARTS {
        let title = format!("{title}, {workload}");
        let svg = svg_chart(&rows, workload, &title, y_label, value).map_err(std::io::Error::other)?;
        std::fs::write(dir.join(format!("{stem}.svg")), svg)?;
        png_chart(&dir.join(format!("{stem}.png")), &rows, workload, &title, y_label, value)
            .map_err(std::io::Error::other)?;
    }
    Ok(text)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn row(label: &str, pct: f64, ops: f64) -> Row {
        Row {
            label: label.into(),
            workload: "get-set".into(),
            read_pct: pct,
            clients: 4,
            outstanding: 100,
            payload_bytes: 1024,
            seconds: 5.0,
            ops_per_s: ops,
            p50_ms: 1.0,
            p90_ms: 2.0,
            p99_ms: 3.0,
            p999_ms: 4.0,
            max_ms: 5.0,
            errors: 0,
            events_per_s: 0.0,
            reconnects: 0,
            target_rate: 0.0,
            conn_p99_median_ms: 2.5,
            conn_p99_worst_ms: 4.0,
            conn_p99_spread: 1.6,
            host_steal_per_s: None,
        }
    }

    #[test]
    fn fairness_columns_trail_the_old_ones_and_old_rows_still_parse() {
        let r = row("ringkeeper-standalone", 50.0, 10.0);
        let line = r.csv();
        assert!(line.ends_with(",0,2.500,4.000,1.60,"), "unknown steal is empty: {line}");
        let old: Vec<&str> = line.split(',').take(CSV_COLUMNS_OLD).collect();
        let parsed = Row::parse_csv(&old.join(",")).expect("a 17-column row parses");
        assert_eq!((parsed.p99_ms, parsed.conn_p99_spread, parsed.conn_p99_worst_ms), (3.0, 0.0, 0.0));
        assert!(markdown(std::slice::from_ref(&r)).contains("| 0 | 2.50 | 4.00 | 1.60 |"));
        let fairness: Vec<&str> = line.split(',').take(CSV_COLUMNS_FAIRNESS).collect();
        let parsed = Row::parse_csv(&fairness.join(",")).expect("a 20-column row parses");
        assert_eq!((parsed.conn_p99_spread, parsed.host_steal_per_s), (1.6, None));
        assert!(r.json().ends_with("\"conn_p99_spread\":1.6,\"host_steal_per_s\":null}"), "{}", r.json());
        let robbed = Row { host_steal_per_s: Some(0.0312), ..r };
        assert!(robbed.csv().ends_with(",1.60,0.0312"), "{}", robbed.csv());
        assert_eq!(Row::parse_csv(&robbed.csv()), Some(robbed));
    }

    #[test]
    fn rows_survive_csv_and_the_summary_pairs_servers_by_setup() {
        let r = row("ringkeeper-standalone", 90.0, 1234.5);
        assert_eq!(Row::parse_csv(&r.csv()), Some(r.clone()));
        let names: Vec<&str> = r.fields().iter().map(|f| f.0).collect();
        assert_eq!(CSV_HEADER.split(',').collect::<Vec<_>>(), names);
        assert!(r.json().starts_with("{\"label\":\"ringkeeper-standalone\",\"workload\":\"get-set\",\"read_pct\":90,"));
        let rows = vec![
            r,
            row("zookeeper-standalone", 90.0, 411.5),
            row("ringkeeper-standalone", 0.0, 100.0),
            row("zookeeper-standalone", 0.0, 50.0),
            row("ceiling-standalone", 0.0, 9000.0),
        ];
        let s = summary(&rows, "get-set");
        assert!(
            s.contains("| ceiling-standalone | ringkeeper-standalone | zookeeper-standalone | ratio standalone |"),
            "{s}"
        );
        assert!(s.contains("| 90 | – | 1234 | 412 | 3.00× |"), "{s}");
        assert!(s.contains("| 0 | 9000 | 100 | 50 | 2.00× |"), "{s}");
        let svg = svg_chart(&rows, "get-set", "t", "ops", |r| r.ops_per_s).expect("a chart");
        assert!(svg.starts_with("<svg") && svg.ends_with("</svg>\n"), "{svg}");
        // One line and one legend entry per label, one circle per point.
        for (label, color) in [("ceiling-standalone", "#1f77b4"), ("zookeeper-standalone", "#2ca02c")] {
            assert!(svg.contains(&format!(">\n{label}\n</text>")), "{label}: {svg}");
            let stroke = format!("stroke=\"{color}\"");
            let polylines = svg.lines().filter(|l| l.starts_with("<polyline") && l.to_lowercase().contains(&stroke));
            assert_eq!(polylines.count(), 2, "{label}'s line and its legend entry: {svg}");
        }
        assert_eq!(svg.matches("<circle").count(), rows.len());
    }

    /// An open-loop row at `rate` ops/s with the given p50 and p99.
    fn open(label: &str, pct: f64, rate: f64, p50: f64, p99: f64) -> Row {
        Row { target_rate: rate, p50_ms: p50, p99_ms: p99, ..row(label, pct, rate) }
    }

    #[test]
    fn open_loop_points_pair_by_read_share_and_rate() {
        let at = |label: &str, rate: f64, p50: f64, p99: f64| open(label, 50.0, rate, p50, p99);
        let rows = vec![
            row("zookeeper-ensemble3", 50.0, 10_000.0),
            at("zookeeper-ensemble3", 1000.0, 2.0, 8.0),
            at("ringkeeper-ensemble3", 1000.0, 0.5, 2.0),
            at("zookeeper-ensemble3", 5000.0, 3.0, 9.0),
            at("ringkeeper-ensemble3", 5000.0, 1.0, 6.0),
        ];
        let s = summary(&rows, "get-set");
        assert!(s.contains("### Latency at a fixed open-loop rate, ensemble3 (get-set)"), "{s}");
        assert!(s.contains("| 50 | 10% | 1000 | 0.50 / 2.00 | 2.00 / 8.00 | 4.0×, 4.0× |"), "{s}");
        assert!(s.contains("| 50 | 50% | 5000 | 1.00 / 6.00 | 3.00 / 9.00 | 3.0×, 1.5× |"), "{s}");
        assert!(s.contains("both at most 1/2 of ZooKeeper's at 1 of 2 points."), "{s}");
        assert!(!s.contains("floor"), "no floor column without floor rows: {s}");
        assert!(!s.contains("steal"), "no steal column without steal measured: {s}");
    }

    /// A point whose either window lost CPU to the hypervisor is marked, and the factor is
    /// counted again over the points where both windows were measured calm.
    #[test]
    fn open_loop_points_with_host_steal_are_marked_and_counted_apart() {
        let at = |label: &str, rate: f64, p50: f64, p99: f64, steal: Option<f64>| Row {
            host_steal_per_s: steal,
            ..open(label, 0.0, rate, p50, p99)
        };
        let rows = vec![
            row("zookeeper-ensemble3", 0.0, 10_000.0),
            // Met, calm.
            at("zookeeper-ensemble3", 1000.0, 2.0, 8.0, Some(0.0)),
            at("ringkeeper-ensemble3", 1000.0, 0.5, 2.0, Some(0.01)),
            // Met, but ZooKeeper's window was robbed: not among the calm points.
            at("zookeeper-ensemble3", 2000.0, 9.0, 90.0, Some(0.5)),
            at("ringkeeper-ensemble3", 2000.0, 1.0, 6.0, Some(0.0)),
            // Missed, calm.
            at("zookeeper-ensemble3", 3000.0, 1.0, 6.0, Some(0.02)),
            at("ringkeeper-ensemble3", 3000.0, 1.0, 6.0, Some(0.0)),
            // ringkeeper's steal unknown (an older row): neither calm nor perturbed.
            at("zookeeper-ensemble3", 4000.0, 4.0, 16.0, Some(0.0)),
            at("ringkeeper-ensemble3", 4000.0, 1.0, 6.0, None),
        ];
        let s = summary(&rows, "get-set");
        assert!(s.contains("zookeeper / ringkeeper p50, p99 | host steal ringkeeper / zookeeper, CPU-s/s |"), "{s}");
        assert!(s.contains("| 9.0×, 15.0× | 0.000 / **0.500** |"), "{s}");
        assert!(s.contains("| 1.0×, 1.0× | 0.000 / 0.020 |"), "{s}");
        assert!(s.contains("| 4.0×, 2.7× | ? / 0.000 |"), "{s}");
        assert!(s.contains("both at most 1/2 of ZooKeeper's at 3 of 4 points."), "{s}");
        assert!(
            s.contains(
                "in bold) at 1 of 4 points with steal measured; at the 2 points where neither server's window \
                        lost that much, both are at most 1/2 of ZooKeeper's at 1."
            ),
            "{s}"
        );
    }

    #[test]
    fn open_loop_floor_counts_the_points_below_it() {
        let at = |label: &str, rate: f64, p50: f64, p99: f64| open(label, 100.0, rate, p50, p99);
        let rows = vec![
            row("zookeeper-netns3", 100.0, 10_000.0),
            // Half of ZooKeeper's p50 and p99 below the floor.
            at("zookeeper-netns3", 1000.0, 0.64, 2.44),
            at("ringkeeper-netns3", 1000.0, 0.63, 4.71),
            at("floor-netns3", 1000.0, 0.60, 1.89),
            // Above the floor in both; ringkeeper's own p99 below the floor's.
            at("zookeeper-netns3", 5000.0, 2.14, 9.54),
            at("ringkeeper-netns3", 5000.0, 0.62, 1.43),
            at("floor-netns3", 5000.0, 0.58, 1.50),
            // Half of ZooKeeper's p50 below the floor; its p99 exactly twice the floor's (not below).
            at("zookeeper-netns3", 6000.0, 1.0, 4.0),
            at("ringkeeper-netns3", 6000.0, 0.8, 2.5),
            at("floor-netns3", 6000.0, 0.7, 2.0),
            // A point the floor did not run: counted in neither floor figure.
            at("zookeeper-netns3", 7000.0, 3.0, 9.0),
            at("ringkeeper-netns3", 7000.0, 2.0, 3.0),
            // A ringkeeper row that completed nothing: no point at all.
            at("zookeeper-netns3", 8000.0, 3.0, 9.0),
            Row { ops_per_s: 0.0, ..at("ringkeeper-netns3", 8000.0, 0.0, 0.0) },
            at("floor-netns3", 8000.0, 1.0, 1.0),
        ];
        let s = summary(&rows, "get-set");
        assert!(
            s.contains(
                "| ringkeeper-netns3 p50 / p99 ms | zookeeper-netns3 p50 / p99 ms | floor-netns3 p50 / p99 ms |"
            ),
            "{s}"
        );
        assert!(s.contains("| 100 | 10% | 1000 | 0.63 / 4.71 | 0.64 / 2.44 | 0.60 / 1.89 | 1.0×, 0.5× |"), "{s}");
        assert!(s.contains("| 100 | 70% | 7000 | 2.00 / 3.00 | 3.00 / 9.00 | – | 1.5×, 3.0× |"), "{s}");
        assert!(s.contains("both at most 1/2 of ZooKeeper's at 1 of 4 points."), "{s}");
        assert!(s.contains("one window) at 2 of 3 points: p50 at 2, p99 at 1."), "{s}");
        assert!(s.contains("below the floor, in p50 or p99, at 1 (the floor"), "{s}");
    }

    #[test]
    fn png_charts_are_written() {
        let rows = vec![row("ringkeeper-standalone", 0.0, 100.0), row("ringkeeper-standalone", 50.0, 300.0)];
        let dir = std::env::temp_dir().join(format!("rk-bench-png-{}", std::process::id()));
        std::fs::create_dir_all(&dir).expect("temp dir");
        let path = dir.join("t.png");
        let drawn = png_chart(&path, &rows, "get-set", "t", "ops", |r| r.ops_per_s);
        let bytes = std::fs::read(&path);
        let _ = std::fs::remove_dir_all(&dir);
        drawn.expect("a chart");
        let bytes = bytes.expect("the PNG file");
        assert_eq!(&bytes[..8], b"\x89PNG\r\n\x1a\n");
        // IHDR: width and height.
        assert_eq!(u32::from_be_bytes([bytes[16], bytes[17], bytes[18], bytes[19]]), CHART_WIDTH_PX);
        assert_eq!(u32::from_be_bytes([bytes[20], bytes[21], bytes[22], bytes[23]]), CHART_HEIGHT_PX);
    }
}
