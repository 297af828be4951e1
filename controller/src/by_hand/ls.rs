//! `sandbench ls`: every sandbench sandbox on this machine, with its run, side, age, expiry and
//! cost so far.

use std::time::{SystemTime, UNIX_EPOCH};

use crate::provision::{ContainerInfo, Provisioner, labels};

fn now_secs() -> i64 {
    SystemTime::now().duration_since(UNIX_EPOCH).map(|d| d.as_secs() as i64).unwrap_or(0)
}

fn duration(secs: i64) -> String {
    match secs {
        s if s < 0 => "expired".to_string(),
        s if s < 120 => format!("{s}s"),
        s if s < 7200 => format!("{}m", s / 60),
        s => format!("{}h{:02}m", s / 3600, s % 3600 / 60),
    }
}

/// `sandbench ls`: a table of every sandbench sandbox.
pub fn table(containers: &[ContainerInfo], now: i64) -> String {
    let mut rows = vec![
        ["SANDBOX", "RUN", "ROLE", "IMAGE", "STATE", "AGE", "EXPIRES IN", "COST SO FAR"].map(String::from).to_vec(),
    ];
    for c in containers {
        let label = |k: &str| c.labels.get(k).cloned().unwrap_or_default();
        let age = now - c.created;
        let expires =
            label(labels::EXPIRES_AT).parse::<i64>().map(|e| duration(e - now)).unwrap_or_else(|_| "—".into());
        let cost = label(labels::USD_PER_HOUR)
            .parse::<f64>()
            .map(|rate| format!("${:.4}", rate * age as f64 / 3600.0))
            .unwrap_or_else(|_| "—".into());
        rows.push(vec![
            c.name.clone(),
            label(labels::RUN),
            label(labels::ROLE),
            c.image.clone(),
            c.state.clone(),
            duration(age),
            expires,
            cost,
        ]);
    }
    let widths: Vec<usize> = (0..8).map(|i| rows.iter().map(|r| r[i].chars().count()).max().unwrap_or(0)).collect();
    rows.iter()
        .map(|r| {
            r.iter().zip(&widths).map(|(c, w)| format!("{c:<w$}")).collect::<Vec<_>>().join("  ").trim_end().to_string()
                + "\n"
        })
        .collect()
}

/// `sandbench ls`.
pub async fn ls(provisioner: &dyn Provisioner) -> anyhow::Result<String> {
    let mut all = provisioner.list(None).await?;
    all.sort_by(|a, b| a.name.cmp(&b.name));
    if all.is_empty() {
        return Ok("no sandbench sandboxes\n".into());
    }
    Ok(table(&all, now_secs()))
}

#[cfg(test)]
mod tests {
    use sandbench_proto::Side;

    use super::*;

    #[test]
    fn the_table_shows_age_expiry_and_cost_so_far() {
        let c = ContainerInfo {
            id: "abc".into(),
            name: "sandbench-r1-base".into(),
            state: "running".into(),
            image: "node:24-bookworm".into(),
            created: 1_000,
            labels: [
                (labels::RUN.to_string(), "r1".to_string()),
                (labels::ROLE.to_string(), Side::Base.to_string()),
                (labels::EXPIRES_AT.to_string(), "2800".to_string()),
                (labels::USD_PER_HOUR.to_string(), "0.36".to_string()),
            ]
            .into(),
        };
        let text = table(&[c], 1_600);
        let row = text.lines().nth(1).unwrap();
        assert_eq!(row, "sandbench-r1-base  r1   base  node:24-bookworm  running  10m  20m         $0.0600", "{text}");
    }
}
