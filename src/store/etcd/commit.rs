//! One commit on etcd: the commit's plan (`store::hpa::plan`, the run rules both stores
//! share) as the operations of one transaction guarded by the state key's `mod_revision`,
//! handed to the batcher.

use tokio::sync::oneshot;

use super::{
    EtcdStore,
    batcher::Pending,
    pb::{DeleteRangeRequest, PutRequest, RequestOp, request_op::Request as Op},
};
use crate::store::{
    Commit, Loaded, Seen, StoreError, fleet,
    hpa::{
        LogOptions,
        plan::{self, CommitPlan, PlanOptions},
    },
    record,
};

fn put(key: Vec<u8>, value: Vec<u8>) -> RequestOp {
    RequestOp {
        request: Some(Op::RequestPut(PutRequest {
            key,
            value,
            ..Default::default()
        })),
    }
}

fn delete(key: Vec<u8>) -> RequestOp {
    RequestOp {
        request: Some(Op::RequestDeleteRange(DeleteRangeRequest {
            key,
            ..Default::default()
        })),
    }
}

impl EtcdStore {
    /// The store's log options; the newest run written whole (a tail would cost every
    /// uncached read of the state a second read: `read_state`).
    fn plan_options(&self) -> PlanOptions {
        PlanOptions {
            log: LogOptions {
                decision_log_len: self.options.decision_log_len,
                decision_retention: self.options.decision_retention,
                max_pod_names: self.options.max_pod_names,
            },
            tails: false,
        }
    }

    /// The commit's plan as one guarded etcd transaction: its log puts and deletes, the state
    /// record, and a scaling group's record with `also`.
    pub(super) async fn commit_guarded(
        &self,
        seen: Seen,
        commit: Commit<'_>,
    ) -> Result<(), StoreError> {
        let Commit {
            key,
            history,
            decision,
            group: also,
        } = commit;
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
        let previous = plan::built_on(previous, seen.withdraw_newest);
        // The log's keys (sled layout, oldest first): none for a target without state; the
        // cache's; or one keys-only range, only when the plan reads them.
        let known_log = match cached_log {
            _ if previous.is_none() => Some(Vec::new()),
            Some(log) => Some(log),
            None if plan::reads_log(previous.as_ref(), decision) => Some(self.log_keys(key).await?),
            None => None,
        };
        let logged = known_log.iter().flatten().cloned().map(Ok::<_, StoreError>);
        let plan = plan::plan(
            key,
            previous,
            history,
            decision,
            &self.plan_options(),
            logged,
        )?;
        let new_log = known_log.map(|mut log| {
            plan.apply_to_keys(&mut log);
            log
        });
        let CommitPlan {
            log_puts,
            state: state_value,
            log_deletes,
            mut next,
        } = plan;
        let state_key = self.state_key(key);
        let mut ops = Vec::with_capacity(log_puts.len() + log_deletes.len() + 2);
        ops.extend(log_puts.into_iter().map(|(k, v)| put(self.log_key(&k), v)));
        ops.extend(log_deletes.iter().map(|k| delete(self.log_key(k))));
        ops.push(put(state_key.clone(), state_value.clone()));
        // A scaling group's record, in the same transaction, guarded by its revision.
        let guard = also.map(|g| {
            let group_key = self.record_key(&fleet::GROUPS, &g.name);
            ops.push(put(
                group_key.clone(),
                record::fleet::encode_group(&g.group),
            ));
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
