//! LOLWUT (issue 28): Redis 7.0's "computer art and the Redis version".
//!
//! `LOLWUT [VERSION v] [args]`: without a version, or with one that has no
//! art of its own (7 and the rest), the reply is the version line alone,
//! as Redis 7.0's. `VERSION 5` draws a Schotter (Georg Nees, 1968) in the
//! same spirit as Redis's: a grid of squares (arguments: columns of text,
//! squares per row, squares per column; 66, 8 and 12 by default) each
//! turned and shifted by a random amount that grows row by row, plotted on
//! a canvas of Braille characters (2x4 dots a character), then the credit
//! line. The drawing is ours and random, so no two replies are equal, as
//! in Redis. Redis's `VERSION 6` (8-bit skyscrapers) is not drawn: that
//! version answers with the version line (docs/COMMANDS.md).

use super::super::util::arg_i64;
use super::super::{CmdResult, Ctx};
use crate::protocol::Args;

const VERSION_LINE: &str = "Redis ver. 7.0.15\n";

pub(super) fn lolwut(ctx: &mut Ctx, args: Args) -> CmdResult {
    let mut version = 7;
    let mut rest = 1;
    if args.len() >= 3 && args.get(1).eq_ignore_ascii_case(b"version") {
        version = arg_i64(args.get(2))?;
        rest = 3;
    }
    let text = match version {
        5 => {
            let mut n = [66, 8, 12];
            for (i, v) in n
                .iter_mut()
                .enumerate()
                .take(args.len().saturating_sub(rest))
            {
                *v = arg_i64(args.get(rest + i))?;
            }
            schotter(n[0].clamp(1, 1000), n[1].clamp(1, 200), n[2].clamp(1, 200))
                + "\nGeorg Nees - schotter, plotter on paper, 1968. "
                + VERSION_LINE
        }
        _ => VERSION_LINE.to_string(),
    };
    ctx.out.verbatim(text.as_bytes());
    Ok(())
}

/// A canvas of dots, drawn in Braille characters.
struct Canvas {
    w: usize,
    h: usize,
    dots: Vec<bool>,
}

impl Canvas {
    fn set(&mut self, x: i64, y: i64) {
        if x >= 0 && y >= 0 && (x as usize) < self.w && (y as usize) < self.h {
            self.dots[y as usize * self.w + x as usize] = true;
        }
    }

    fn line(&mut self, (x0, y0): (f64, f64), (x1, y1): (f64, f64)) {
        let steps = (x1 - x0).abs().max((y1 - y0).abs()).ceil().max(1.0) as usize;
        for i in 0..=steps {
            let t = i as f64 / steps as f64;
            self.set(
                (x0 + (x1 - x0) * t).round() as i64,
                (y0 + (y1 - y0) * t).round() as i64,
            );
        }
    }

    /// Each 2x4 block of dots as one Braille character (U+2800 + bits).
    fn render(&self) -> String {
        const BIT: [[u32; 2]; 4] = [[0x01, 0x08], [0x02, 0x10], [0x04, 0x20], [0x40, 0x80]];
        let mut s = String::new();
        for cy in 0..self.h / 4 {
            for cx in 0..self.w / 2 {
                let mut code = 0;
                for (dy, row) in BIT.iter().enumerate() {
                    for (dx, bit) in row.iter().enumerate() {
                        if self.dots[(cy * 4 + dy) * self.w + cx * 2 + dx] {
                            code |= bit;
                        }
                    }
                }
                s.push(char::from_u32(0x2800 + code).unwrap_or(' '));
            }
            s.push('\n');
        }
        s
    }
}

/// The squares: row r's are turned and shifted by up to r / rows of the
/// most disorder, as in Nees's plot.
fn schotter(cols: i64, per_row: i64, per_col: i64) -> String {
    let w = cols as usize * 2;
    let side = (w as f64 - 4.0) / per_row as f64;
    let h = ((side * per_col as f64 + 8.0) as usize).div_ceil(4) * 4;
    let mut c = Canvas {
        w,
        h,
        dots: vec![false; w * h],
    };
    let mut seed = crate::keyspace::hlc::unix_ms() | 1;
    let mut rand = move || {
        seed ^= seed << 13;
        seed ^= seed >> 7;
        seed ^= seed << 17;
        (seed % 10_000) as f64 / 10_000.0 - 0.5
    };
    for r in 0..per_col {
        let disorder = r as f64 / per_col as f64;
        for q in 0..per_row {
            let angle = rand() * std::f64::consts::PI / 2.0 * disorder;
            let (dx, dy) = (rand() * side * disorder, rand() * side * disorder);
            let cx = 2.0 + side * (q as f64 + 0.5) + dx;
            let cy = 4.0 + side * (r as f64 + 0.5) + dy;
            let corner = |k: usize| {
                let a =
                    angle + std::f64::consts::FRAC_PI_4 + k as f64 * std::f64::consts::FRAC_PI_2;
                let d = side / std::f64::consts::SQRT_2;
                (cx + d * a.cos(), cy + d * a.sin())
            };
            for k in 0..4 {
                c.line(corner(k), corner(k + 1));
            }
        }
    }
    c.render()
}
