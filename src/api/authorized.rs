//! The per-key half of authorization: `Authorized` wraps a service and, before its handler
//! runs, checks the caller's verb on the request's target key (`auth::authorize`), so a
//! denied call stores nothing. The List RPCs return only the keys the caller may read, with
//! pagination kept correct (see `filtered_page`); every delete is audited.
//!
//! The handlers themselves know nothing of authorization: the authentication and the verb of
//! each method are decided once by `auth::layer`, the key check once here.

use std::future::Future;

use tonic::{Request, Response, Status};

use super::convert;
use crate::{
    auth::{self, Caller, KeyFilter, Verb},
    pb::v1::{
        self as pb, DeleteTargetRequest, DeleteVerticalTargetRequest, GetHistoryRequest,
        GetRecommendationRequest, ListTargetsRequest, ListTargetsResponse,
        ListVerticalTargetsRequest, ListVerticalTargetsResponse, RecommendRequest,
        RecommendResponse, RecordUsageRequest, RecordUsageResponse, ReportScaleRequest,
        ReportScaleResponse, SimulateRequest, SimulateResponse, TargetHistory,
        VerticalRecommendation, horizontal_autoscaler_server::HorizontalAutoscaler,
        vertical_autoscaler_server::VerticalAutoscaler,
    },
};

/// Most keys one List call reads from the store to fill a page of readable keys; past it the
/// page is returned short, with a token to continue (AIP-158 allows short pages; only an
/// empty token means the end). Keeps a tenant's List bounded on a large shared store.
const LIST_SCAN_BUDGET: usize = 10_000;
/// Largest page asked of the inner List (its own cap).
const LIST_CHUNK_MAX: usize = 1000;

/// What `Authorized` needs of the horizontal service beyond the wire trait: the
/// `ListTargets` response for the keys it chose (those the caller may read), with their
/// summaries when asked, so that a tenant's listing reads the state of its own targets only
/// and the key scan stays the one every List uses (`filtered_page`).
#[tonic::async_trait]
pub(crate) trait TargetSummaries {
    /// The `ListTargets` response for exactly `keys`, in order, ending with
    /// `next_page_token`; with `include_summaries` each key's summary too, and then the
    /// response budget may cut the page first (its token continues after the last key it
    /// holds).
    async fn listing(
        &self,
        keys: Vec<String>,
        next_page_token: String,
        include_summaries: bool,
    ) -> Result<ListTargetsResponse, Status>;

    /// The names of the stored policies or groups after `after`, at most `size`, and whether
    /// more follow: the scan `filtered_page` pages through.
    async fn names(
        &self,
        kind: FleetKind,
        after: Option<String>,
        size: i32,
    ) -> Result<(Vec<String>, bool), Status>;

    /// `ListPolicies`' answer for exactly `names` (the response budget may cut it first; its
    /// token then continues after the last policy it holds).
    async fn policies_named(
        &self,
        names: Vec<String>,
        next_page_token: String,
    ) -> Result<pb::ListPoliciesResponse, Status>;

    /// `ListScalingGroups`' answer for exactly `names`, likewise.
    async fn groups_named(
        &self,
        names: Vec<String>,
        next_page_token: String,
    ) -> Result<pb::ListScalingGroupsResponse, Status>;
}

/// Policies or scaling groups, for [`TargetSummaries::names`].
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum FleetKind {
    Policies,
    Groups,
}

/// The names the caller may read, handed to the service with a request whose answer names
/// stored things (DeletePolicy's refusal names the targets and groups that use the policy).
#[derive(Clone, Debug)]
pub(crate) struct Readable(pub(crate) KeyFilter);

/// A group's definition with only the selectors the caller may read: member keys, member
/// prefixes, per-member units and the policies it selects by (a group report shows what
/// another tenant's members are only to callers who may read them).
fn members_readable(group: &mut pb::ScalingGroup, filter: &KeyFilter) {
    if filter.is_all() {
        return;
    }
    group.member_keys.retain(|k| filter.allows(k));
    group.member_prefixes.retain(|p| filter.allows(p));
    group.member_policies.retain(|p| filter.allows(p));
    group.member_units.retain(|k, _| filter.allows(k));
}

/// The key prefixes a scaling group's members must be under: the `configure` rights of the
/// caller who puts it, handed to the service with the request.
#[derive(Clone, Debug)]
pub(crate) struct GroupScope(pub(crate) Vec<String>);

/// A service whose calls are checked against the caller's rights on the target key.
pub(crate) struct Authorized<S> {
    inner: S,
    /// Whether an authorization file is configured; without one every call passes.
    enforce: bool,
}

impl<S> Authorized<S> {
    pub(crate) fn new(inner: S, enforce: bool) -> Self {
        Authorized { inner, enforce }
    }

    /// The caller's `verb` on `key`, which the request carries in `field` (its path, named
    /// in the error). A key with control characters is INVALID_ARGUMENT before any
    /// permission is looked at: no such key can be stored, and a denial would put it into
    /// the audit log.
    fn check<T>(
        &self,
        request: &Request<T>,
        verb: Verb,
        field: &str,
        key: &str,
    ) -> Result<(), Status> {
        if key.chars().any(char::is_control) {
            let mut v = convert::Violations::default();
            v.add(field, "must not contain control characters");
            return v.into_result(()).map_err(Status::from);
        }
        auth::authorize(caller(request), self.enforce, verb, key)
    }

    /// A Recommend's checks on `item`: `recommend` on its target, and `read` on its policy,
    /// whose spec the call reads. `item` is `request`'s message, or its request number
    /// `batch` of a RecommendBatch: then the fields are named `requests[i].target_key` and a
    /// refusal's message starts with `requests[i]: `.
    fn check_recommend<T>(
        &self,
        request: &Request<T>,
        item: &RecommendRequest,
        batch: Option<usize>,
    ) -> Result<(), Status> {
        let at = batch.map(|i| format!("requests[{i}]"));
        let field = |name: &str| match &at {
            Some(at) => format!("{at}.{name}"),
            None => name.to_owned(),
        };
        let named = |status: Status| match (&at, status.code()) {
            (Some(at), tonic::Code::PermissionDenied | tonic::Code::Unauthenticated) => {
                Status::new(status.code(), format!("{at}: {}", status.message()))
            }
            _ => status,
        };
        self.check(
            request,
            Verb::Recommend,
            &field("target_key"),
            &item.target_key,
        )
        .map_err(named)?;
        if !item.policy.is_empty() {
            self.check(request, Verb::Read, &field("policy"), &item.policy)
                .map_err(named)?;
        }
        Ok(())
    }

    /// [`Self::check`] on the request's `target_key`.
    fn check_target<T: Keyed>(&self, request: &Request<T>, verb: Verb) -> Result<(), Status> {
        self.check(request, verb, "target_key", request.get_ref().target_key())
    }

    /// The names the caller may read, for the listings and reports of the fleet.
    fn readable<T>(&self, request: &Request<T>) -> Result<KeyFilter, Status> {
        Ok(
            KeyFilter::for_caller(caller(request), self.enforce, Verb::Read)?
                .with_max_key_bytes(max_key_bytes()),
        )
    }
}

/// A request naming one target by its `target_key`.
trait Keyed {
    fn target_key(&self) -> &str;
}

macro_rules! keyed {
    ($($request:ty),*) => {
        $(impl Keyed for $request {
            fn target_key(&self) -> &str {
                &self.target_key
            }
        })*
    };
}

keyed!(
    ReportScaleRequest,
    GetHistoryRequest,
    RecordUsageRequest,
    GetRecommendationRequest
);

/// The server's `--max-key-bytes`, from the request's context.
fn max_key_bytes() -> usize {
    super::context::with(|c| c.limits.max_key_bytes).unwrap_or(crate::config::DEFAULT_MAX_KEY_BYTES)
}

fn caller<T>(request: &Request<T>) -> Option<&Caller> {
    request.extensions().get::<Caller>()
}

/// The audit outcome of a finished call.
fn outcome<T>(result: &Result<T, Status>) -> String {
    match result {
        Ok(_) => "ok".to_owned(),
        Err(status) => format!("{:?}", status.code()),
    }
}

/// One page of the keys `filter` lets through, read from `fetch(after, chunk)` (a List of the
/// inner service from after `after`, returning the keys and whether more follow).
///
/// Each page holds up to `page_size` readable keys and its token resumes after the last key
/// returned (or, when the scan budget ran out first, after the last key read), so following
/// the tokens visits every readable key exactly once, in order, whatever the page sizes. The
/// scan skips from one readable prefix to the next instead of reading the keys between.
pub(crate) async fn filtered_page<F, Fut>(
    page_size: i32,
    page_token: &str,
    filter: &KeyFilter,
    mut fetch: F,
) -> Result<(Vec<String>, String), Status>
where
    F: FnMut(Option<String>, i32) -> Fut,
    Fut: Future<Output = Result<(Vec<String>, bool), Status>>,
{
    let page = convert::page_request(page_size, page_token)?;
    let chunk = i32::try_from((page.size + 1).min(LIST_CHUNK_MAX)).unwrap_or(100);
    let mut after = page.after;
    let mut keys = Vec::new();
    let mut scanned = 0usize;
    loop {
        let Some(start) = filter.resume_after(after.as_deref()) else {
            return Ok((keys, String::new()));
        };
        after = start;
        if scanned >= LIST_SCAN_BUDGET
            && let Some(position) = &after
        {
            return Ok((keys, convert::page_token(position)));
        }
        let (chunk_keys, more) = fetch(after.clone(), chunk).await?;
        let read = chunk_keys.len();
        let mut jumped = false;
        for (i, key) in chunk_keys.into_iter().enumerate() {
            scanned += 1;
            if filter.allows(&key) {
                after = Some(key.clone());
                keys.push(key);
                if keys.len() == page.size {
                    let end = i + 1 == read && !more;
                    let token = if end {
                        String::new()
                    } else {
                        convert::page_token(&keys[keys.len() - 1])
                    };
                    return Ok((keys, token));
                }
            } else {
                let jump = filter.resume_after(Some(&key));
                let stays = jump.as_ref().is_some_and(|j| j.as_deref() == Some(&key));
                after = Some(key);
                if !stays {
                    // A gap between readable prefixes, or past the last: skip it.
                    jumped = true;
                    break;
                }
            }
        }
        if !jumped && !more {
            return Ok((keys, String::new()));
        }
    }
}

#[tonic::async_trait]
impl<S: HorizontalAutoscaler + TargetSummaries> HorizontalAutoscaler for Authorized<S> {
    async fn recommend(
        &self,
        request: Request<RecommendRequest>,
    ) -> Result<Response<RecommendResponse>, Status> {
        self.check_recommend(&request, request.get_ref(), None)?;
        self.inner.recommend(request).await
    }

    /// Every request's checks before any is decided: a batch naming one target (or policy)
    /// the caller may not use is refused whole, and stores nothing.
    async fn recommend_batch(
        &self,
        request: Request<pb::RecommendBatchRequest>,
    ) -> Result<Response<pb::RecommendBatchResponse>, Status> {
        for (i, item) in request.get_ref().requests.iter().enumerate() {
            self.check_recommend(&request, item, Some(i))?;
        }
        self.inner.recommend_batch(request).await
    }

    /// The outcome of a Recommend's rescale: the same verb as the call it completes.
    async fn report_scale(
        &self,
        request: Request<ReportScaleRequest>,
    ) -> Result<Response<ReportScaleResponse>, Status> {
        self.check_target(&request, Verb::Recommend)?;
        self.inner.report_scale(request).await
    }

    async fn get_history(
        &self,
        request: Request<GetHistoryRequest>,
    ) -> Result<Response<TargetHistory>, Status> {
        self.check_target(&request, Verb::Read)?;
        self.inner.get_history(request).await
    }

    /// The readable keys under the request's `prefix` (the caller's prefixes narrowed to
    /// it), scanned as every List is; their summaries, when asked, are read for those keys
    /// only, so a tenant sees, and costs, only its own targets.
    async fn list_targets(
        &self,
        request: Request<ListTargetsRequest>,
    ) -> Result<Response<ListTargetsResponse>, Status> {
        convert::summary::key_prefix(&request.get_ref().prefix, max_key_bytes())?;
        let filter = KeyFilter::for_caller(caller(&request), self.enforce, Verb::Read)?
            .with_max_key_bytes(max_key_bytes());
        if filter.is_all() {
            return self.inner.list_targets(request).await;
        }
        let req = request.into_inner();
        let filter = filter.within(&req.prefix);
        let (target_keys, next_page_token) =
            filtered_page(req.page_size, &req.page_token, &filter, |after, size| {
                let inner = &self.inner;
                async move {
                    let page = inner
                        .list_targets(Request::new(ListTargetsRequest {
                            page_size: size,
                            page_token: convert::page_token(after.as_deref().unwrap_or("")),
                            ..Default::default()
                        }))
                        .await?
                        .into_inner();
                    Ok((page.target_keys, !page.next_page_token.is_empty()))
                }
            })
            .await?;
        Ok(Response::new(
            self.inner
                .listing(target_keys, next_page_token, req.include_summaries)
                .await?,
        ))
    }

    /// A replay reads history: `read` on the stored target, or on every key of an inline
    /// trace (its requests are evaluated, never stored).
    async fn simulate(
        &self,
        request: Request<SimulateRequest>,
    ) -> Result<Response<SimulateResponse>, Status> {
        let req = request.get_ref();
        // A group's replay: `read` on the group, and on every member whose log it replays.
        if !req.group.is_empty() {
            self.check(&request, Verb::Read, "group", &req.group)?;
            if self.enforce {
                let status = self
                    .inner
                    .get_scaling_group(Request::new(pb::GetScalingGroupRequest {
                        name: req.group.clone(),
                    }))
                    .await?
                    .into_inner();
                for member in &status.members {
                    self.check(&request, Verb::Read, "group", &member.target_key)?;
                }
            }
        } else if !req.target_key.is_empty() || req.trace.is_empty() {
            self.check(&request, Verb::Read, "target_key", &req.target_key)?;
        }
        let mut checked: Vec<&str> = Vec::new();
        for (i, step) in req.trace.iter().enumerate() {
            if !checked.contains(&step.target_key.as_str()) {
                self.check(
                    &request,
                    Verb::Read,
                    &format!("trace[{i}].target_key"),
                    &step.target_key,
                )?;
                checked.push(&step.target_key);
            }
        }
        self.inner.simulate(request).await
    }

    async fn delete_target(
        &self,
        request: Request<DeleteTargetRequest>,
    ) -> Result<Response<()>, Status> {
        let key = request.get_ref().target_key.clone();
        self.check(&request, Verb::Delete, "target_key", &key)?;
        let who = caller(&request).cloned();
        let result = self.inner.delete_target(request).await;
        auth::audit(who.as_ref(), Verb::Delete, &key, &outcome(&result));
        result
    }

    async fn put_policy(
        &self,
        request: Request<pb::PutPolicyRequest>,
    ) -> Result<Response<pb::Policy>, Status> {
        let name = request
            .get_ref()
            .policy
            .as_ref()
            .map(|p| p.name.clone())
            .unwrap_or_default();
        self.check(&request, Verb::Configure, "policy.name", &name)?;
        let who = caller(&request).cloned();
        let result = self.inner.put_policy(request).await;
        auth::audit(who.as_ref(), Verb::Configure, &name, &outcome(&result));
        result
    }

    async fn get_policy(
        &self,
        request: Request<pb::GetPolicyRequest>,
    ) -> Result<Response<pb::Policy>, Status> {
        self.check(&request, Verb::Read, "name", &request.get_ref().name)?;
        self.inner.get_policy(request).await
    }

    /// The policies the caller may read, scanned as every List is (`filtered_page`): the
    /// page and its token hold only readable names.
    async fn list_policies(
        &self,
        request: Request<pb::ListPoliciesRequest>,
    ) -> Result<Response<pb::ListPoliciesResponse>, Status> {
        let filter = self.readable(&request)?;
        if filter.is_all() {
            return self.inner.list_policies(request).await;
        }
        let req = request.into_inner();
        let (names, next_page_token) =
            filtered_page(req.page_size, &req.page_token, &filter, |after, size| {
                self.inner.names(FleetKind::Policies, after, size)
            })
            .await?;
        Ok(Response::new(
            self.inner.policies_named(names, next_page_token).await?,
        ))
    }

    async fn delete_policy(
        &self,
        mut request: Request<pb::DeletePolicyRequest>,
    ) -> Result<Response<()>, Status> {
        let name = request.get_ref().name.clone();
        self.check(&request, Verb::Configure, "name", &name)?;
        // The refusal names only what the caller may read.
        let readable = self.readable(&request)?;
        request.extensions_mut().insert(Readable(readable));
        let who = caller(&request).cloned();
        let result = self.inner.delete_policy(request).await;
        auth::audit(who.as_ref(), Verb::Configure, &name, &outcome(&result));
        result
    }

    /// `configure` on the group's name and on everything it selects: each member key, each
    /// member prefix (a prefix within the caller's prefixes selects only keys within them),
    /// each policy it selects by.
    async fn put_scaling_group(
        &self,
        mut request: Request<pb::PutScalingGroupRequest>,
    ) -> Result<Response<pb::ScalingGroup>, Status> {
        if let Some(prefixes) =
            KeyFilter::for_caller(caller(&request), self.enforce, Verb::Configure)?
                .allowed_prefixes()
        {
            let scope = GroupScope(prefixes.to_vec());
            request.extensions_mut().insert(scope);
        }
        let group = request.get_ref().group.clone().unwrap_or_default();
        self.check(&request, Verb::Configure, "group.name", &group.name)?;
        let selected = [
            ("member_keys", &group.member_keys),
            ("member_prefixes", &group.member_prefixes),
            ("member_policies", &group.member_policies),
        ];
        for (field, names) in selected {
            for (i, name) in names.iter().enumerate() {
                self.check(
                    &request,
                    Verb::Configure,
                    &format!("group.{field}[{i}]"),
                    name,
                )?;
            }
        }
        for key in group.member_units.keys() {
            self.check(
                &request,
                Verb::Configure,
                &format!("group.member_units[{key:?}]"),
                key,
            )?;
        }
        let who = caller(&request).cloned();
        let result = self.inner.put_scaling_group(request).await;
        auth::audit(
            who.as_ref(),
            Verb::Configure,
            &group.name,
            &outcome(&result),
        );
        result
    }

    async fn get_scaling_group(
        &self,
        request: Request<pb::GetScalingGroupRequest>,
    ) -> Result<Response<pb::ScalingGroupStatus>, Status> {
        self.check(&request, Verb::Read, "name", &request.get_ref().name)?;
        let filter = self.readable(&request)?;
        let mut response = self.inner.get_scaling_group(request).await?;
        let status = response.get_mut();
        if let Some(group) = status.group.as_mut() {
            members_readable(group, &filter);
        }
        status.members.retain(|m| filter.allows(&m.target_key));
        Ok(response)
    }

    /// The groups the caller may read, scanned as every List is (`filtered_page`), each
    /// showing only the members the caller may read.
    async fn list_scaling_groups(
        &self,
        request: Request<pb::ListScalingGroupsRequest>,
    ) -> Result<Response<pb::ListScalingGroupsResponse>, Status> {
        let filter = self.readable(&request)?;
        if filter.is_all() {
            return self.inner.list_scaling_groups(request).await;
        }
        let req = request.into_inner();
        let (names, next_page_token) =
            filtered_page(req.page_size, &req.page_token, &filter, |after, size| {
                self.inner.names(FleetKind::Groups, after, size)
            })
            .await?;
        let mut response = self.inner.groups_named(names, next_page_token).await?;
        for group in &mut response.groups {
            members_readable(group, &filter);
        }
        Ok(Response::new(response))
    }

    async fn delete_scaling_group(
        &self,
        request: Request<pb::DeleteScalingGroupRequest>,
    ) -> Result<Response<()>, Status> {
        let name = request.get_ref().name.clone();
        self.check(&request, Verb::Configure, "name", &name)?;
        let who = caller(&request).cloned();
        let result = self.inner.delete_scaling_group(request).await;
        auth::audit(who.as_ref(), Verb::Configure, &name, &outcome(&result));
        result
    }
}

#[tonic::async_trait]
impl<S: VerticalAutoscaler> VerticalAutoscaler for Authorized<S> {
    async fn record_usage(
        &self,
        request: Request<RecordUsageRequest>,
    ) -> Result<Response<RecordUsageResponse>, Status> {
        self.check_target(&request, Verb::WriteUsage)?;
        self.inner.record_usage(request).await
    }

    async fn get_recommendation(
        &self,
        request: Request<GetRecommendationRequest>,
    ) -> Result<Response<VerticalRecommendation>, Status> {
        self.check_target(&request, Verb::Read)?;
        self.inner.get_recommendation(request).await
    }

    async fn delete_vertical_target(
        &self,
        request: Request<DeleteVerticalTargetRequest>,
    ) -> Result<Response<()>, Status> {
        let key = request.get_ref().target_key.clone();
        self.check(&request, Verb::Delete, "target_key", &key)?;
        let who = caller(&request).cloned();
        let result = self.inner.delete_vertical_target(request).await;
        auth::audit(who.as_ref(), Verb::Delete, &key, &outcome(&result));
        result
    }

    async fn list_vertical_targets(
        &self,
        request: Request<ListVerticalTargetsRequest>,
    ) -> Result<Response<ListVerticalTargetsResponse>, Status> {
        let filter = KeyFilter::for_caller(caller(&request), self.enforce, Verb::Read)?
            .with_max_key_bytes(max_key_bytes());
        if filter.is_all() {
            return self.inner.list_vertical_targets(request).await;
        }
        let req = request.into_inner();
        let (target_keys, next_page_token) =
            filtered_page(req.page_size, &req.page_token, &filter, |after, size| {
                let inner = &self.inner;
                async move {
                    let page = inner
                        .list_vertical_targets(Request::new(ListVerticalTargetsRequest {
                            page_size: size,
                            page_token: convert::page_token(after.as_deref().unwrap_or("")),
                        }))
                        .await?
                        .into_inner();
                    Ok((page.target_keys, !page.next_page_token.is_empty()))
                }
            })
            .await?;
        Ok(Response::new(ListVerticalTargetsResponse {
            target_keys,
            next_page_token,
        }))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A sorted key space served in pages, as the store's List does; counts the keys read.
    struct Keys {
        all: Vec<String>,
        read: usize,
    }

    impl Keys {
        fn new(keys: &[&str]) -> Self {
            let mut all: Vec<String> = keys.iter().map(|k| (*k).to_owned()).collect();
            all.sort();
            Keys { all, read: 0 }
        }

        fn page(&mut self, after: Option<&str>, size: i32) -> (Vec<String>, bool) {
            let from = after.map_or(0, |a| self.all.partition_point(|k| k.as_str() <= a));
            let size = usize::try_from(size).unwrap();
            let end = (from + size).min(self.all.len());
            self.read += end - from;
            (self.all[from..end].to_vec(), end < self.all.len())
        }
    }

    async fn list_all(keys: &mut Keys, filter: &KeyFilter, page_size: i32) -> Vec<String> {
        let mut out = Vec::new();
        let mut token = String::new();
        for _ in 0..1000 {
            let (page, next) = filtered_page(page_size, &token, filter, |after, size| {
                std::future::ready(Ok(keys.page(after.as_deref(), size)))
            })
            .await
            .unwrap();
            assert!(page.len() <= usize::try_from(page_size).unwrap());
            out.extend(page);
            if next.is_empty() {
                return out;
            }
            token = next;
        }
        panic!("pagination does not end");
    }

    #[tokio::test]
    async fn every_readable_key_once_in_order_whatever_the_page_size() {
        let universe = [
            "a", "team-a", "team-a-x", "team-a/1", "team-a/2", "team-a/3", "team-a0", "team-b/1",
            "team-b/2", "team-c/1", "team-c/2", "team-c/3", "z/1",
        ];
        let filter = KeyFilter::prefixes(vec!["team-a/".into(), "team-c/".into()]);
        let wanted: Vec<String> = universe
            .iter()
            .filter(|k| filter.allows(k))
            .map(|k| (*k).to_owned())
            .collect();
        assert_eq!(wanted.len(), 6);
        for page_size in [1, 2, 3, 5, 6, 7, 100] {
            let mut keys = Keys::new(&universe);
            assert_eq!(
                list_all(&mut keys, &filter, page_size).await,
                wanted,
                "page size {page_size}"
            );
        }
        // Nothing readable: one empty page, the end.
        let mut keys = Keys::new(&universe);
        assert!(
            list_all(&mut keys, &KeyFilter::prefixes(vec![]), 10)
                .await
                .is_empty()
        );
        assert_eq!(keys.read, 0);
    }

    #[tokio::test]
    async fn a_small_tenant_on_a_large_store_reads_little() {
        let mut universe: Vec<String> = (0..20_000).map(|i| format!("big/{i:05}")).collect();
        universe.extend((0..3).map(|i| format!("small/{i}")));
        let refs: Vec<&str> = universe.iter().map(String::as_str).collect();
        let mut keys = Keys::new(&refs);
        let filter = KeyFilter::prefixes(vec!["small/".into()]);
        assert_eq!(
            list_all(&mut keys, &filter, 100).await,
            ["small/0", "small/1", "small/2"]
        );
        // The jump to "small" skips the 20,000 other keys.
        assert!(keys.read <= 3, "{}", keys.read);

        // Another tenant's keys that sort between "team-a" and "team-a/" (`-` < `/`) are
        // skipped too: the scan starts exactly at "team-a/", so they are never read and no page
        // token holds one (the review stored 10,050 `team-a-big/...` keys there, and a scan
        // that ran out of budget among them returned `team-a-big/10009` as the token).
        let mut universe: Vec<String> = (0..25_000).map(|i| format!("team-a-big/{i:05}")).collect();
        universe.extend(["team-a/1".into(), "team-a/2".into(), "team-a0".into()]);
        let refs: Vec<&str> = universe.iter().map(String::as_str).collect();
        let mut keys = Keys::new(&refs);
        let mine = KeyFilter::prefixes(vec!["team-a/".into()]);
        let (first, token) = filtered_page(1, "", &mine, |after, size| {
            std::future::ready(Ok(keys.page(after.as_deref(), size)))
        })
        .await
        .unwrap();
        assert_eq!(first, ["team-a/1"]);
        assert_eq!(
            convert::page_request(1, &token)
                .ok()
                .and_then(|p| p.after)
                .as_deref(),
            Some("team-a/1")
        );
        assert!(keys.read <= 3, "{}", keys.read);
        assert_eq!(
            list_all(&mut keys, &mine, 10).await,
            ["team-a/1", "team-a/2"]
        );
        // A forged token inside the other tenant's keys reads none of them either.
        let forged = convert::page_token("team-a-big/00000");
        let mut keys = Keys::new(&refs);
        let (page, _) = filtered_page(10, &forged, &mine, |after, size| {
            std::future::ready(Ok(keys.page(after.as_deref(), size)))
        })
        .await
        .unwrap();
        assert_eq!(page, ["team-a/1", "team-a/2"]);
        assert!(keys.read <= 3, "{}", keys.read);
    }

    #[tokio::test]
    async fn bad_page_arguments_are_still_invalid_argument() {
        let filter = KeyFilter::prefixes(vec!["a/".into()]);
        let mut keys = Keys::new(&["a/1"]);
        for (size, token) in [(-1, ""), (10, "zz")] {
            let err = filtered_page(size, token, &filter, |after, size| {
                std::future::ready(Ok(keys.page(after.as_deref(), size)))
            })
            .await
            .unwrap_err();
            assert_eq!(err.code(), tonic::Code::InvalidArgument);
        }
    }
}
