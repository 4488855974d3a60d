//! One commit on etcd: the sled store's run rules (`store::hpa`) as the operations of one
//! transaction guarded by the state key's `mod_revision`, handed to the batcher.

use tokio::sync::oneshot;

use super::{
    EtcdStore,
    batcher::Pending,
    keys,
    pb::{DeleteRangeRequest, PutRequest, RequestOp, request_op::Request as Op},
};
use crate::{
    engine::hpa::history::History,
    store::{
        DecisionEntry, GroupWrite, Loaded, Run, Seen, StoreError, fleet,
        hpa::StoredState,
        record::{self, hpa},
    },
};

impl EtcdStore {
    /// The sled store's commit ([`SledStore`](crate::store::SledStore)'s, same records and run
    /// rules) as one guarded etcd transaction: the state record with the new history and the
    /// newest run as `pending`; when the decision closes the previous run, that run's record
    /// under its final key and the deletes of runs beyond the count bound or the retention.
    pub(super) async fn commit_guarded(
        &self,
        key: &str,
        seen: Seen,
        history: &History,
        decision: &DecisionEntry,
        also: Option<&GroupWrite>,
    ) -> Result<(), StoreError> {
        let max_names = self.options.max_pod_names;
        // The log's keys as the cache knows them for the state this commit builds on.
        let cached_log = self.cached_log(key, seen.revision);
        let previous = match seen.loaded {
            Some(Loaded { state, .. }) => state,
            None => {
                let (state, revision) = self.read_state(key).await?;
                if revision != seen.revision {
                    return Err(StoreError::Conflict {
                        key: key.to_owned(),
                    });
                }
                state
            }
        };
        let previous = if seen.withdraw_newest {
            previous.map(StoredState::without_newest)
        } else {
            previous
        };
        let previous = previous.as_ref();
        let state_key = self.state_key(key);
        let mut ops = Vec::new();
        let extends = previous
            .and_then(|p| p.pending.as_ref())
            .filter(|p| p.extends_with(decision))
            .filter(|_| previous.is_some_and(|p| p.log_len.is_some()));
        // The log's keys after this commit, when known.
        let new_log;
        let mut next = if let Some(run) = extends {
            // The same outcome as the newest run: the run grows, nothing else is written.
            new_log = cached_log;
            let extended = run.extended_by(decision);
            StoredState {
                history: History::default(),
                next_seq: previous.map_or(0, |p| p.next_seq),
                log_len: previous.and_then(|p| p.log_len),
                pending: Some(extended),
                logged_body: None,
            }
        } else {
            let seq = previous.map_or(0, |p| p.next_seq);
            let mut log = match (previous.and_then(|p| p.log_len), cached_log) {
                (Some(0) | None, _) if previous.is_none() => Vec::new(),
                (_, Some(log)) => log,
                _ => self.log_keys(key).await?,
            };
            if let Some(pending) = previous.and_then(|p| p.pending.as_ref()) {
                let log_key = self.decision_key(key, pending.run.first_time, pending.seq);
                ops.push(RequestOp {
                    request: Some(Op::RequestPut(PutRequest {
                        key: log_key.clone(),
                        value: hpa::encode_run(&hpa::closed_run_to_record(
                            pending, decision, max_names,
                        )),
                        ..Default::default()
                    })),
                });
                if !log.contains(&log_key) {
                    log.push(log_key);
                }
            }
            // Trim as sled does: by count (the bound includes the new pending run) and by age
            // (a closed run ended before its successor began).
            let bound = self.options.decision_log_len.max(1);
            let excess = (log.len() + 1).saturating_sub(bound);
            let cutoff = decision.time.minus(self.options.decision_retention);
            let mut removed = 0;
            for (i, k) in log.iter().enumerate() {
                let successor_began = match log.get(i + 1) {
                    Some(next) => keys::decision_key_time(self.log_part(next)),
                    None => Some(decision.time),
                };
                let old = successor_began.is_some_and(|t| t <= cutoff);
                if removed < excess || old {
                    removed += 1;
                    // The run closed by this commit may go at once (log bound 1): then it is
                    // not written either (etcd refuses a put and a delete of one key).
                    ops.retain(|op: &RequestOp| {
                        !matches!(&op.request, Some(Op::RequestPut(put)) if &put.key == k)
                    });
                    ops.push(RequestOp {
                        request: Some(Op::RequestDeleteRange(DeleteRangeRequest {
                            key: k.clone(),
                            ..Default::default()
                        })),
                    });
                } else {
                    break;
                }
            }
            let mut fresh = decision.clone();
            fresh.run = Run {
                count: 1,
                first_time: decision.time,
            };
            fresh.seq = seq;
            let log_len = (log.len() - removed) as u64;
            log.drain(..removed);
            new_log = Some(log);
            StoredState {
                history: History::default(),
                next_seq: seq.saturating_add(1),
                log_len: Some(log_len),
                pending: Some(fresh),
                logged_body: None,
            }
        };
        let state_value = next.encode(history, max_names);
        ops.push(RequestOp {
            request: Some(Op::RequestPut(PutRequest {
                key: state_key.clone(),
                value: state_value.clone(),
                ..Default::default()
            })),
        });
        // A scaling group's record, in the same transaction, guarded by its revision.
        let guard = also.map(|g| {
            let group_key = self.record_key(&fleet::GROUPS, &g.name);
            ops.push(RequestOp {
                request: Some(Op::RequestPut(PutRequest {
                    key: group_key.clone(),
                    value: record::fleet::encode_group(&g.group),
                    ..Default::default()
                })),
            });
            (group_key, g.revision)
        });
        let bytes = ops
            .iter()
            .map(|op| match &op.request {
                Some(Op::RequestPut(p)) => p.key.len() + p.value.len() + 16,
                Some(Op::RequestDeleteRange(d)) => d.key.len() + 16,
                _ => 16,
            })
            .sum::<usize>()
            + 2 * state_key.len()
            + 32;
        let (done, result) = oneshot::channel();
        let pending = Pending {
            state_key,
            state_value,
            expected: seen.revision,
            ops,
            bytes,
            target: key.to_owned(),
            attempts: 0,
            resends: 0,
            done,
            guard,
        };
        self.commits
            .send(pending)
            .map_err(|_| StoreError::Etcd("the etcd batcher stopped".to_owned()))?;
        // No timeout here: the batcher bounds each send, and sends at most MAX_ATTEMPTS times
        // after transport failures and MAX_RESENDS times after other targets' conflicts.
        let outcome = result
            .await
            .map_err(|_| StoreError::Etcd("the etcd batcher stopped".to_owned()))
            .and_then(|r| r);
        match outcome {
            Ok(revision) => {
                next.history = history.clone();
                self.cache_committed(key, next, revision, new_log);
                Ok(())
            }
            Err(e) => {
                // Whatever etcd holds now, it is not what the cache says.
                self.cache_forget(key);
                Err(e)
            }
        }
    }
}
