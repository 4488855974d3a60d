//! Single-key records on etcd ([`Records`]: the VPA state), each put guarded by the key's
//! `mod_revision` when the caller read it first.

use super::{
    EtcdStore,
    pb::{
        Compare, DeleteRangeRequest, PutRequest, RequestOp, TxnRequest,
        compare::{CompareResult, CompareTarget, TargetUnion},
        request_op::Request as Op,
    },
};
use crate::store::{
    KeyPage, StoreError,
    db::{Put, Records, Space, Versioned},
};

#[tonic::async_trait]
impl Records for EtcdStore {
    async fn get_record(&self, space: &Space, key: &str) -> Result<Option<Versioned>, StoreError> {
        Ok(self
            .get(self.record_key(space, key))
            .await?
            .map(|kv| Versioned {
                bytes: kv.value,
                revision: kv.mod_revision,
            }))
    }

    /// With `if_revision`: one transaction guarded by `mod_revision(key) == if_revision`
    /// (etcd compares a missing key's revisions as 0). A try whose answer was lost may have
    /// been applied, and its repeat then fails the guard: if the record now holds exactly
    /// our bytes, it was ours (acknowledged); otherwise another writer came first
    /// ([`StoreError::Conflict`]: the API re-reads and decides again).
    async fn put_record(&self, space: &Space, key: &str, put: Put) -> Result<(), StoreError> {
        let Put { bytes, if_revision } = put;
        let etcd_key = self.record_key(space, key);
        let put = PutRequest {
            key: etcd_key.clone(),
            value: bytes.clone(),
            ..Default::default()
        };
        let Some(revision) = if_revision else {
            return self
                .members
                .call(|mut kv| {
                    let request = put.clone();
                    async move { kv.put(request).await }
                })
                .await
                .map(|_| ());
        };
        let request = TxnRequest {
            compare: vec![Compare {
                result: CompareResult::Equal as i32,
                target: CompareTarget::Mod as i32,
                key: etcd_key.clone(),
                target_union: Some(TargetUnion::ModRevision(revision)),
                range_end: vec![],
            }],
            success: vec![RequestOp {
                request: Some(Op::RequestPut(put)),
            }],
            failure: vec![],
        };
        let response = self.members.txn(request).await?;
        if response.succeeded
            || self
                .get(etcd_key)
                .await?
                .is_some_and(|kv| kv.value == bytes && kv.mod_revision > revision)
        {
            return Ok(());
        }
        Err(StoreError::Conflict {
            key: key.to_owned(),
        })
    }

    async fn delete_record(&self, space: &Space, key: &str) -> Result<bool, StoreError> {
        let deleted = self
            .delete_all(vec![DeleteRangeRequest {
                key: self.record_key(space, key),
                ..Default::default()
            }])
            .await?;
        Ok(deleted > 0)
    }

    async fn list_records(
        &self,
        space: &Space,
        after: Option<&str>,
        limit: usize,
    ) -> Result<KeyPage, StoreError> {
        self.list(self.key(&[space.etcd.as_bytes()]), after, limit)
            .await
    }
}
