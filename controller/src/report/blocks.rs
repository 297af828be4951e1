//! Statistics blocked by shard. A merged run ([`crate::shard`]) measured its pairs on several
//! machines, and one machine may be uniformly faster than another. Pairs never cross machines
//! (both trials of a pair come from one shard), so the paired analysis — head/base ratios within
//! a pair — is untouched by a per-machine speed factor. The unpaired figures (medians, spreads,
//! and through them the reference rule and the paired rule's few-pairs fallback) would be widened
//! by it, so before they are computed each shard's values, base and head alike, are divided by
//! that shard's centre — the geometric mean, over its complete pairs, of √(base·head) — and
//! multiplied by the centre of all pairs. A constant factor k on one machine multiplies its
//! values and its centre alike and cancels; the head/base difference within each shard is kept.

use super::{Report, values};

impl Report {
    /// The values of `key` per side (in trial order) on which medians and spreads are computed:
    /// as measured, or, in a report of several shards, with each shard's speed scaled out; and a
    /// note when a report of several shards could not be scaled.
    pub(super) fn blocked_values(&self, key: &str) -> (Vec<f64>, Vec<f64>, Option<String>) {
        let base = values(self.base_side.metrics.get(key));
        let head = values(self.head_side.metrics.get(key));
        let raw = |note: Option<String>| (base.iter().map(|x| x.1).collect(), head.iter().map(|x| x.1).collect(), note);
        let Some(count) = self.shards.first().map(|p| p.shard.count).filter(|_| self.shards.len() > 1) else {
            return raw(None);
        };
        let block = |t: u32| (t % count) as usize;
        let mut sums = vec![(0.0_f64, 0_usize); count as usize];
        for (t, b) in &base {
            if let Some((_, h)) = head.iter().find(|(ht, _)| ht == t)
                && *b > 0.0
                && *h > 0.0
            {
                let entry = &mut sums[block(*t)];
                entry.0 += (b.ln() + h.ln()) / 2.0;
                entry.1 += 1;
            }
        }
        let mut blocks: Vec<usize> = base.iter().chain(&head).map(|(t, _)| block(*t)).collect();
        blocks.sort_unstable();
        blocks.dedup();
        if blocks.len() < 2 {
            return raw(None);
        }
        if base.iter().chain(&head).any(|(_, v)| *v <= 0.0) {
            return raw(Some("medians and spreads across shards as measured: a value is zero or negative".into()));
        }
        if let Some(b) = blocks.iter().find(|b| sums[**b].1 == 0) {
            return raw(Some(format!(
                "medians and spreads across shards as measured: shard {}/{count} has no complete pair",
                b + 1
            )));
        }
        let pairs: usize = sums.iter().map(|s| s.1).sum();
        let grand = sums.iter().map(|s| s.0).sum::<f64>() / pairs as f64;
        let scale = |t: u32, v: f64| {
            let (sum, n) = sums[block(t)];
            (v.ln() - sum / n as f64 + grand).exp()
        };
        (base.iter().map(|(t, v)| scale(*t, *v)).collect(), head.iter().map(|(t, v)| scale(*t, *v)).collect(), None)
    }
}
