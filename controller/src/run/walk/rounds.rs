//! The rounds of a stepwise order ([`Order::Interleaved`], [`Order::Duet`]): trial `t` of both
//! sides of a pair starts stepwise in both sandboxes (each ready, waiting for its first turn),
//! and the conductor grants their segments — one timed run each, the warmup with the first —
//! one side at a time in the order A, B, B, A, A, … (A: the side the ABBA schedule puts first
//! in the round) when interleaved, so drift slower than one run hits both sides alike; both at
//! once in a duet, each sandbox pinned to CPUs of its own, swapped every other trial.
//!
//! A side whose trial ends (done, failed or lost) takes no more turns; the other goes on alone.
//! A round with one side to run (the other skipped by the gates, or completed by an earlier
//! attempt of a resumed run) runs it as a plain trial. A lost sandbox's slot is retried as in
//! the ABBA walk ([`renew`]), alone.

use futures_util::future::join_all;
use sandbench_proto::StepId;
use tokio::sync::watch;

use super::super::gate::{Stop, TrialResult};
use super::super::schedule::{Side, Slot, remaining_after};
use super::renew::settle;
use super::side::SideRun;
use super::state::Run;
use super::trial::trial;
use crate::observations::server::Hub;
use crate::provision::Lost;
use crate::spec::Order;
use crate::station::sandbox;

/// One pair's lane of a stepwise stage, round by round (a round: one trial of both sides).
pub async fn walk_rounds(run: &Run, sides: &[SideRun], lane: &[Slot]) -> Option<Stop> {
    let mut at = 0;
    while at < lane.len() {
        let end = lane[at..].iter().position(|s| s.trial != lane[at].trial).map_or(lane.len(), |n| at + n);
        if let Err(stop) = round(run, sides, lane, at..end).await {
            return Some(stop);
        }
        at = end;
    }
    None
}

/// The slots `range` of `lane` (one trial, both sides): each passed through the gates, those
/// that run run together, then every result recorded in the lane's order.
async fn round(run: &Run, sides: &[SideRun], lane: &[Slot], range: std::ops::Range<usize>) -> Result<(), Stop> {
    let slots = &lane[range.clone()];
    let mut results: Vec<Option<TrialResult>> = vec![None; slots.len()];
    let mut todo: Vec<(usize, &SideRun)> = Vec::new();
    for (i, slot) in slots.iter().enumerate() {
        if let Some(result) = run.done_before(slot) {
            // Completed by an earlier attempt (a resumed run): counted as it ended.
            if let Some(stop) = run.check() {
                return Err(stop);
            }
            results[i] = Some(result);
            continue;
        }
        if run.admit(slot)?
            && let Some(side) = sides.iter().find(|s| s.pair == slot.pair && s.side == slot.side)
        {
            todo.push((i, side));
        }
    }
    let began = std::time::Instant::now();
    let ran = together(run, slots, &todo).await;
    // A round without the lens is what an added round costs (the sides' slots of it in all).
    if let Some(first) = slots.first().filter(|s| !todo.is_empty() && !run.runs_lens(s.phase, s.trial)) {
        run.round_times.record_plain(first.phase, todo.len() as u32, began.elapsed());
    }
    for (&(i, side), ran) in todo.iter().zip(ran) {
        results[i] = Some(settle(run, side, &slots[i], ran).await);
    }
    for (i, slot) in slots.iter().enumerate() {
        let Some(result) = &results[i] else { continue };
        for error in run.gates().record(slot, result, remaining_after(lane, range.start + i)) {
            run.error(error);
        }
    }
    Ok(())
}

/// Runs the round's slots `todo` (indexes into `slots`, with their sides): stepwise under the
/// conductor when there are two, as a plain trial when one.
async fn together(run: &Run, slots: &[Slot], todo: &[(usize, &SideRun)]) -> Vec<(TrialResult, Option<Lost>)> {
    if todo.len() < 2 {
        return join_all(todo.iter().map(|&(i, side)| trial(run, side, &slots[i], false))).await;
    }
    let duet = run.plan.trials.order == Order::Duet;
    if duet {
        pin(run, todo, slots[todo[0].0].trial).await;
    }
    let (ended, watched) = watch::channel(vec![false; todo.len()]);
    let trials = todo.iter().enumerate().map(|(k, &(i, side))| {
        let ended = &ended;
        async move {
            let result = trial(run, side, &slots[i], true).await;
            ended.send_modify(|e| e[k] = true);
            result
        }
    });
    let targets: Vec<Target> = todo
        .iter()
        .map(|&(i, side)| Target {
            sandbox: side.current().map(|s| s.id().to_string()).unwrap_or_default(),
            command: StepId::new(slots[i].phase, slots[i].trial),
        })
        .collect();
    let hub = run.station.hub();
    let (results, ()) = tokio::join!(join_all(trials), conduct(&hub, &targets, duet, watched));
    results
}

/// A stepwise command the conductor grants turns to.
struct Target {
    sandbox: String,
    command: StepId,
}

/// The turns, in order (see the module's text), until every target's trial has ended. A
/// target whose last segment ended before an untimed rest (the lens, the footprint) waits until
/// every other has too; then their rests are granted at once, interleaved or not: nothing
/// timed runs beside them.
async fn conduct(hub: &Hub, targets: &[Target], duet: bool, mut ended: watch::Receiver<Vec<bool>>) {
    let mut next = vec![1u32; targets.len()];
    for step in 0usize.. {
        let order: Vec<usize> = if duet || step.is_multiple_of(2) {
            (0..targets.len()).collect()
        } else {
            (0..targets.len()).rev().collect()
        };
        let running: Vec<usize> = order.iter().copied().filter(|&k| !finished(hub, &targets[k], &ended, k)).collect();
        let resting: Vec<usize> = running.iter().copied().filter(|&k| at_rest(hub, &targets[k], next[k])).collect();
        let groups: Vec<Vec<usize>> = if resting.len() == running.len() {
            vec![order]
        } else {
            // The timed segments left (at once in a duet, else one target at a time); the
            // resting targets wait.
            let timed: Vec<usize> = order.into_iter().filter(|k| !resting.contains(k)).collect();
            if duet { vec![timed] } else { timed.into_iter().map(|k| vec![k]).collect() }
        };
        let mut granted = false;
        for group in groups {
            let live: Vec<usize> = group.into_iter().filter(|&k| !finished(hub, &targets[k], &ended, k)).collect();
            for &k in &live {
                // A lost grant is resent with the command after a reconnection (the hub keeps it).
                let _ = sandbox::grant_turn(hub, &targets[k].sandbox, targets[k].command, next[k]).await;
            }
            for &k in &live {
                segment_ended(hub, &targets[k], next[k], &mut ended, k).await;
                next[k] += 1;
            }
            granted |= !live.is_empty();
        }
        if !granted {
            return;
        }
    }
}

/// Whether `target`'s last ended segment (`next - 1`) was its last timed one: its rest is untimed.
fn at_rest(hub: &Hub, target: &Target, next: u32) -> bool {
    let command = target.command.to_string();
    hub.status(&target.sandbox).is_some_and(|s| s.borrow().untimed.get(&command) == Some(&(next - 1)))
}

/// Whether target `k`'s trial has ended: its command done, or its trial over on our side.
fn finished(hub: &Hub, target: &Target, ended: &watch::Receiver<Vec<bool>>, k: usize) -> bool {
    let command = target.command.to_string();
    ended.borrow()[k] || hub.status(&target.sandbox).is_none_or(|s| s.borrow().done.contains_key(&command))
}

/// Waits until target `k` ended its segment `index` (or its command, or its trial).
async fn segment_ended(hub: &Hub, target: &Target, index: u32, ended: &mut watch::Receiver<Vec<bool>>, k: usize) {
    let Some(mut status) = hub.status(&target.sandbox) else { return };
    let command = target.command.to_string();
    loop {
        {
            let s = status.borrow_and_update();
            if s.done.contains_key(&command) || s.yielded.get(&command).is_some_and(|&y| y >= index) {
                return;
            }
        }
        if ended.borrow_and_update()[k] {
            return;
        }
        tokio::select! {
            changed = status.changed() => if changed.is_err() { return },
            changed = ended.changed() => if changed.is_err() { return },
        }
    }
}

/// A duet's round: each side on CPUs of its own, which side has which swapped every other trial.
async fn pin(run: &Run, todo: &[(usize, &SideRun)], trial: u32) {
    let Some(sets) = &run.cpus.duet else {
        return run.error("a duet's round without the duet's CPU sets".to_string());
    };
    for &(_, side) in todo {
        let Some(live) = side.current() else { continue };
        let first = usize::from(side.side == Side::Head);
        let set = &sets[(first + trial as usize) % 2];
        if let Err(err) = run.station.provisioner().pin(live.id(), set).await {
            run.error(format!("{}: {err:#}", side.label));
        }
    }
}
