//! Who decides a target: this replica, or the one a call is forwarded to (a store shared by
//! replicas that share out its targets: [`super::etcd::ownership`]). A handle the API holds
//! beside the store, not a store method: a store is about records.

use std::sync::Arc;

use super::etcd::ownership::Ownership;

/// The owners of the targets as this replica sees them.
#[derive(Clone, Debug, Default)]
pub struct Owners(Option<Arc<Ownership>>);

impl Owners {
    /// Every target is decided here (sled, tests, replicas that do not forward).
    pub fn none() -> Self {
        Owners(None)
    }

    /// The owners of `ownership`'s view when calls are forwarded ([`Ownership::forward`]),
    /// otherwise [`Self::none`].
    pub fn of(ownership: Arc<Ownership>) -> Self {
        Owners(ownership.forward.then_some(ownership))
    }

    /// The address of the replica that owns `key`, when it is another one; `None`: this one
    /// decides.
    pub fn owner_of(&self, key: &str) -> Option<String> {
        self.0.as_ref()?.owner_of(key).map(|r| r.addr)
    }
}
