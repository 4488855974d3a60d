//! The model's compact encoding, what the store keeps ([`LoadModel::to_bytes`],
//! [`LoadModel::from_bytes`]).

use super::*;

impl LoadModel {
    /// The state as bytes: [`FORMAT_VERSION`], the width of [`Stored`], then the fields in
    /// little-endian order (profile values only for slots seen). With every slot seen, 4,004 B
    /// and 80 B per pending evaluation (`lead / period` of them, 6 at a 60 s period): 4.5 KB,
    /// and 6,564 B with the ring full.
    pub fn to_bytes(&self) -> Vec<u8> {
        let mut w = Vec::with_capacity(6 * 1024);
        w.push(FORMAT_VERSION);
        w.push(STORED_BYTES as u8);
        put_u32(&mut w, self.startup_secs);
        put_u32(&mut w, self.lead_secs);
        let flags = u8::from(self.t0.is_some())
            | u8::from(self.tprev.is_some()) << 1
            | u8::from(self.tclosed.is_some()) << 2
            | u8::from(self.committed) << 3;
        w.push(flags);
        for v in [self.t0, self.tprev, self.tclosed].into_iter().flatten() {
            put_i64(&mut w, v);
        }
        put_f64(&mut w, self.last_load);
        for p in [&self.day, &self.week] {
            w.push(u8::from(p.cur.is_some()));
            if let Some(c) = p.cur {
                put_i64(&mut w, c);
            }
            put_f64(&mut w, p.acc);
            put_u32(&mut w, p.accn);
            w.extend_from_slice(&p.cnt);
            for (v, c) in p.val.iter().zip(&p.cnt) {
                if *c > 0 {
                    put_stored(&mut w, *v);
                }
            }
        }
        for i in 0..MODELS {
            let flags = u8::from(self.lev[i].is_some())
                | u8::from(self.sigma[i].is_some()) << 1
                | u8::from(self.first_eval[i].is_some()) << 2
                | u8::from(self.f[i].is_some()) << 3;
            w.push(flags);
            for v in [self.lev[i], self.sigma[i]].into_iter().flatten() {
                put_f64(&mut w, v);
            }
            if let Some(v) = self.first_eval[i] {
                put_i64(&mut w, v);
            }
            if let Some(v) = self.f[i] {
                put_f64(&mut w, v);
            }
        }
        for v in self
            .b1
            .iter()
            .chain(&self.u1)
            .chain(&self.b2)
            .chain(&self.u2)
        {
            put_f64(&mut w, *v);
        }
        for v in [self.bh1, self.uh1, self.bh2, self.uh2] {
            put_f64(&mut w, v);
        }
        for v in self.err_day.iter().chain(&self.act_day) {
            put_f64(&mut w, *v);
        }
        w.push(self.pending.len() as u8);
        for e in &self.pending {
            put_i64(&mut w, e.t);
            put_stored(&mut w, e.capacity);
            put_u32(&mut w, e.reactive);
            put_u32(&mut w, e.final_);
            put_stored(&mut w, e.a_all);
            put_stored(&mut w, e.a_serve);
            for v in e.f.iter().chain(&e.sigma).chain(&e.inputs) {
                put_stored(&mut w, *v);
            }
        }
        w.push(u8::from(self.inputs.is_some()));
        for v in self.inputs.iter().flatten() {
            put_f64(&mut w, *v);
        }
        for v in self.blend_w.iter().chain(self.blend_p.iter().flatten()) {
            put_f64(&mut w, *v);
        }
        w
    }

    /// Decodes [`LoadModel::to_bytes`], and version 1 (four forecasters, margins in load
    /// units): its profiles and levels are kept, its scores are not (they judged margins of
    /// another kind), so its forecasters are scored for [`GATE_MIN_EVAL_SECS`] again, as after
    /// a change of start-up delay. Never panics; any inconsistency is an error (the caller
    /// then starts a fresh model: the state is a cache of what the load did, not a record
    /// anyone relies on).
    pub fn from_bytes(b: &[u8]) -> Result<Self, DecodeError> {
        let mut r = Reader { b, at: 0 };
        let version = r.u8()?;
        let models = match version {
            1 => 4,
            FORMAT_VERSION => MODELS,
            other => return Err(DecodeError::Version(other)),
        };
        let mut m = Self::decode_fields(&mut r, models)?;
        if version == 1 {
            m.reset_scores();
        } else {
            m.inputs = r
                .u8()
                .and_then(|has| (has != 0).then(|| r.f64s::<BLEND_INPUTS>()).transpose())?;
            m.blend_w = r.f64s()?;
            for row in &mut m.blend_p {
                *row = r.f64s()?;
            }
            // A damaged blend starts again rather than forecasting NaN.
            if m.inputs.is_some_and(|v| !v.iter().all(|x| x.is_finite())) {
                m.inputs = None;
            }
            if !m.blend_sane() {
                m.reset_blend();
            }
        }
        if r.at != b.len() {
            return Err(DecodeError::Trailing(b.len() - r.at));
        }
        if m.tprev.is_some() != m.t0.is_some()
            || m.pending.iter().any(|e| m.tprev.is_none_or(|p| e.t > p))
        {
            return Err(DecodeError::Invalid("times out of order"));
        }
        Ok(m)
    }

    /// The fields both versions share, with `models` forecasters (the first `models` of
    /// [`ModelKind::ALL`]; the scores of version 1 are read and then reset by the caller).
    fn decode_fields(r: &mut Reader<'_>, models: usize) -> Result<Self, DecodeError> {
        let width = r.u8()?;
        if usize::from(width) != STORED_BYTES {
            return Err(DecodeError::Precision(width));
        }
        let startup_secs = r.u32()?;
        let lead_secs = r.u32()?;
        let mut m = LoadModel::new(startup_secs, 0);
        m.lead_secs = lead_secs;
        let flags = r.u8()?;
        m.t0 = r.opt_i64(flags & 1 != 0)?;
        m.tprev = r.opt_i64(flags & 2 != 0)?;
        m.tclosed = r.opt_i64(flags & 4 != 0)?;
        m.committed = flags & 8 != 0;
        m.last_load = r.f64()?;
        for p in [&mut m.day, &mut m.week] {
            let has = r.u8()?;
            p.cur = r.opt_i64(has != 0)?;
            p.acc = r.f64()?;
            p.accn = r.u32()?;
            let n = p.cnt.len();
            p.cnt.copy_from_slice(r.take(n)?);
            for s in 0..n {
                if p.cnt[s] > 0 {
                    p.val[s] = r.stored()?;
                }
            }
        }
        for i in 0..models {
            let flags = r.u8()?;
            m.lev[i] = r.opt_f64(flags & 1 != 0)?;
            m.sigma[i] = r.opt_f64(flags & 2 != 0)?;
            m.first_eval[i] = r.opt_i64(flags & 4 != 0)?;
            m.f[i] = r.opt_f64(flags & 8 != 0)?;
        }
        let nc = models * NZ;
        for v in (m.b1[..nc].iter_mut())
            .chain(m.u1[..nc].iter_mut())
            .chain(m.b2[..models].iter_mut())
            .chain(m.u2[..models].iter_mut())
        {
            *v = r.f64()?;
        }
        m.bh1 = r.f64()?;
        m.uh1 = r.f64()?;
        m.bh2 = r.f64()?;
        m.uh2 = r.f64()?;
        for v in (m.err_day[..models].iter_mut()).chain(m.act_day[..models].iter_mut()) {
            *v = r.f64()?;
        }
        let n = usize::from(r.u8()?);
        if n > RING {
            return Err(DecodeError::Invalid(
                "more pending evaluations than the ring holds",
            ));
        }
        for _ in 0..n {
            let t = r.i64()?;
            let capacity = r.stored()?;
            let reactive = r.u32()?;
            let final_ = r.u32()?;
            let a_all = r.stored()?;
            let a_serve = r.stored()?;
            let mut f = [Stored::NAN; MODELS];
            let mut sigma = [Stored::NAN; MODELS];
            for v in (f[..models].iter_mut()).chain(sigma[..models].iter_mut()) {
                *v = r.stored()?;
            }
            let mut inputs = [Stored::NAN; BLEND_INPUTS];
            if models == MODELS {
                for v in &mut inputs {
                    *v = r.stored()?;
                }
            }
            m.pending.push_back(Pending {
                t,
                capacity,
                reactive,
                final_,
                a_all,
                a_serve,
                f,
                sigma,
                inputs,
            });
        }
        Ok(m)
    }
}

/// Why [`LoadModel::from_bytes`] refused its input.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum DecodeError {
    /// Another format version.
    #[error("load model format version {0} is not 1 or {FORMAT_VERSION}")]
    Version(u8),
    /// Written with another float width.
    #[error("load model stored with {0}-byte floats, this build uses {STORED_BYTES}")]
    Precision(u8),
    /// Ends early.
    #[error("load model state truncated")]
    Truncated,
    /// Bytes after the end.
    #[error("{0} bytes after the load model state")]
    Trailing(usize),
    /// Inconsistent content.
    #[error("invalid load model state: {0}")]
    Invalid(&'static str),
}

fn put_u32(w: &mut Vec<u8>, v: u32) {
    w.extend_from_slice(&v.to_le_bytes());
}
fn put_i64(w: &mut Vec<u8>, v: i64) {
    w.extend_from_slice(&v.to_le_bytes());
}
fn put_f64(w: &mut Vec<u8>, v: f64) {
    w.extend_from_slice(&v.to_le_bytes());
}
fn put_stored(w: &mut Vec<u8>, v: Stored) {
    w.extend_from_slice(&v.to_le_bytes());
}

struct Reader<'a> {
    b: &'a [u8],
    at: usize,
}

impl<'a> Reader<'a> {
    fn take(&mut self, n: usize) -> Result<&'a [u8], DecodeError> {
        let end = self.at.checked_add(n).ok_or(DecodeError::Truncated)?;
        let s = self.b.get(self.at..end).ok_or(DecodeError::Truncated)?;
        self.at = end;
        Ok(s)
    }
    fn array<const N: usize>(&mut self) -> Result<[u8; N], DecodeError> {
        let mut a = [0u8; N];
        a.copy_from_slice(self.take(N)?);
        Ok(a)
    }
    fn u8(&mut self) -> Result<u8, DecodeError> {
        Ok(self.take(1)?[0])
    }
    fn u32(&mut self) -> Result<u32, DecodeError> {
        Ok(u32::from_le_bytes(self.array()?))
    }
    fn i64(&mut self) -> Result<i64, DecodeError> {
        Ok(i64::from_le_bytes(self.array()?))
    }
    fn f64(&mut self) -> Result<f64, DecodeError> {
        Ok(f64::from_le_bytes(self.array()?))
    }
    fn stored(&mut self) -> Result<Stored, DecodeError> {
        Ok(Stored::from_le_bytes(self.array()?))
    }
    fn opt_i64(&mut self, present: bool) -> Result<Option<i64>, DecodeError> {
        present.then(|| self.i64()).transpose()
    }
    fn opt_f64(&mut self, present: bool) -> Result<Option<f64>, DecodeError> {
        present.then(|| self.f64()).transpose()
    }
    fn f64s<const N: usize>(&mut self) -> Result<[f64; N], DecodeError> {
        let mut a = [0.0; N];
        for v in &mut a {
            *v = self.f64()?;
        }
        Ok(a)
    }
}
