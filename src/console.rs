//! The web console on the admin listener (`--metrics-listen`): the fleet at a glance and a
//! page per target, server-rendered HTML and SVG (no script, no build step), refreshing
//! itself every few seconds.
//!
//! * `GET /`: the fleet table (`?prefix=` filters, `?sort=key` orders by key; by default the
//!   targets that are failing, limited or at their maximum come first);
//! * `GET /targets/KEY` (KEY percent-encoded): the target's timeline: current and desired
//!   replicas with the stabilized count and the rate limits, each metric against its
//!   target, and the decision runs with their conditions and why each change;
//! * `GET /login`, `POST /login` (a bearer token, checked on the API, then kept on the server
//!   in a session: the browser holds only an opaque session id, in an HttpOnly,
//!   SameSite=Strict cookie, `Secure` when the request came through a TLS proxy), `POST` or
//!   `GET /logout` (ends the session on the server).
//!
//! Every page is built from the API's own calls (`ListTargets` with summaries, `GetHistory`)
//! sent through the same layered service as the gRPC port ([`install`]: Connect's JSON, the
//! refusal log, authentication, authorization, load shedding), with the session's token: a
//! tenant sees exactly what its token may read over gRPC, and nothing is authorized twice.
//!
//! What the console itself holds to: a login only from its own page (a same-origin `Origin`
//! or `Sec-Fetch-Site`; `Origin: null` and a form from another site are refused), its body
//! within 4 KiB and the admin listener's body timeout, a render permit (pages rendered at
//! once) taken only once the caller is authenticated, and, without an authorization file, the
//! `Host` names of `--allowed-hosts` (DNS rebinding).

use std::{
    convert::Infallible,
    fmt::Write as _,
    net::SocketAddr,
    sync::{Arc, Mutex},
};

use bytes::Bytes;
use http_body_util::{BodyExt, Full, Limited};
use serde_json::{Value, json};
use tonic::codegen::http::{
    HeaderMap, HeaderValue, Method, Request as HttpRequest, Response as HttpResponse, StatusCode,
    header,
};
use tower::{ServiceExt, util::BoxCloneService};

use crate::html::esc;

mod charts;
use charts::{metric_chart, replica_chart, runs_table};

type Body = tonic::body::Body;

/// The API as the console calls it: the main listener's layered service.
pub(crate) type Api = BoxCloneService<HttpRequest<Body>, HttpResponse<Body>, Infallible>;

/// The console's way into its server's API: installed once the server's layers exist, and
/// cleared when it stops serving, so that the console never keeps a stopped server's
/// services (and so its store and data-folder lock) alive.
#[derive(Default)]
pub(crate) struct ApiSlot(Mutex<Option<Api>>);

impl ApiSlot {
    /// Makes `service` (the main listener's layers over its routes) the console's API until
    /// the returned guard is dropped.
    pub(crate) fn install<S>(&self, service: S) -> Installed<'_>
    where
        S: tower::Service<HttpRequest<Body>, Response = HttpResponse<Body>, Error = Infallible>
            + Clone
            + Send
            + 'static,
        S::Future: Send + 'static,
    {
        *self
            .0
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner) =
            Some(BoxCloneService::new(service));
        Installed(self)
    }

    fn get(&self) -> Option<Api> {
        self.0
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .clone()
    }
}

/// Clears the console's API when dropped.
pub(crate) struct Installed<'a>(&'a ApiSlot);

impl Drop for Installed<'_> {
    fn drop(&mut self) {
        *self
            .0
            .0
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner) = None;
    }
}

/// Console pages rendered at once (each is a few API calls): the admin listener's
/// connections stay free for probes and scrapes.
pub(crate) const RENDERS: usize = 4;
/// The longest an API call of the console may take.
const CALL_TIMEOUT: std::time::Duration = std::time::Duration::from_secs(10);

/// The cookie holding the browser's session id.
const COOKIE: &str = "autoscaled_session";
/// Sessions kept at once; the least recently used goes first.
const MAX_SESSIONS: usize = 1024;
/// A session unused this long ends.
const SESSION_IDLE: std::time::Duration = std::time::Duration::from_secs(12 * 3600);
/// A session ends this long after its login, used or not.
const SESSION_LIFETIME: std::time::Duration = std::time::Duration::from_secs(24 * 3600);
/// Time allowed for the login form's body.
const BODY_TIMEOUT: std::time::Duration = crate::doors::ADMIN_TIMEOUT;
/// Seconds between a page's refreshes.
const REFRESH_SECS: u32 = 5;
/// Targets shown at most on the fleet page (five pages of the listing).
const MAX_FLEET: usize = 5000;
/// Decision runs listed at most on a target page.
const MAX_RUNS_LISTED: usize = 200;

/// A response of the console.
pub(crate) type Page = HttpResponse<Full<Bytes>>;

/// What the API answered a console call it did not serve (its HTTP status, gRPC code and
/// message), shown on the problem page. The server's own error type is `api::status::ApiError`.
struct CallRefused {
    status: u16,
    code: String,
    message: String,
}

/// Whether `path` is one of the console's.
pub(crate) fn serves(path: &str) -> bool {
    path == "/" || path == "/login" || path == "/logout" || path.starts_with("/targets/")
}

/// One login: the token it was let in with, and its times.
struct Session {
    token: String,
    created: std::time::Instant,
    used: std::time::Instant,
}

/// The console's sessions, by id: the browser holds the id, the token stays here.
#[derive(Default)]
pub(crate) struct Sessions {
    by_id: Mutex<std::collections::HashMap<String, Session>>,
}

impl Sessions {
    /// A new session for `token`; its id.
    fn start(&self, token: String) -> Option<String> {
        let mut id = [0u8; 32];
        ring::rand::SecureRandom::fill(&ring::rand::SystemRandom::new(), &mut id).ok()?;
        let id: String = id.iter().map(|b| format!("{b:02x}")).collect();
        let now = std::time::Instant::now();
        let mut sessions = self.by_id.lock().unwrap_or_else(|e| e.into_inner());
        sessions.retain(|_, s| !s.expired(now));
        if sessions.len() >= MAX_SESSIONS
            && let Some(oldest) = sessions
                .iter()
                .min_by_key(|(_, s)| s.used)
                .map(|(k, _)| k.clone())
        {
            sessions.remove(&oldest);
        }
        sessions.insert(
            id.clone(),
            Session {
                token,
                created: now,
                used: now,
            },
        );
        Some(id)
    }

    /// The token of session `id`, if it is alive.
    fn token(&self, id: &str) -> Option<String> {
        let now = std::time::Instant::now();
        let mut sessions = self.by_id.lock().unwrap_or_else(|e| e.into_inner());
        let session = sessions.get_mut(id)?;
        if session.expired(now) {
            sessions.remove(id);
            return None;
        }
        session.used = now;
        Some(session.token.clone())
    }

    fn end(&self, id: &str) {
        self.by_id
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .remove(id);
    }
}

impl Session {
    fn expired(&self, now: std::time::Instant) -> bool {
        now.duration_since(self.used) > SESSION_IDLE
            || now.duration_since(self.created) > SESSION_LIFETIME
    }
}

/// What the console of one admin listener keeps: its sessions, and which Host names it
/// answers.
pub(crate) struct Console {
    /// What the console shares with its server: readiness, and the way into its API.
    pub(crate) shared: Arc<crate::server::Shared>,
    /// Pages being rendered ([`RENDERS`] at most).
    pub(crate) rendering: tokio::sync::Semaphore,
    pub(crate) sessions: Sessions,
    pub(crate) hosts: crate::connect::HostCheck,
    /// Whether an authorization file asks callers for a token (else pages need no login).
    pub(crate) login: bool,
    /// Pages rendered in the last [`PAGE_TTL`].
    pub(crate) pages: Pages,
}

/// How long a rendered page is served again to the same caller asking for the same thing:
/// shorter than the pages' own refresh, long enough that a caller asking for the fleet in a
/// loop costs one render every [`PAGE_TTL`], not one per request.
const PAGE_TTL: std::time::Duration = std::time::Duration::from_secs(2);
/// Pages kept at once.
const MAX_PAGES: usize = 64;

/// What identifies a rendered page: the caller's token (or none), the path and the
/// parameters the page reads.
type PageKey = (Option<String>, String);

/// Rendered pages, kept for [`PAGE_TTL`]: a render of the fleet reads up to [`MAX_FLEET`]
/// summaries, so a client reloading it in a loop (or many at once) would otherwise take the
/// server's CPU from the API.
#[derive(Default)]
pub(crate) struct Pages {
    kept: Mutex<std::collections::VecDeque<Kept>>,
}

impl Pages {
    fn get(&self, key: &PageKey) -> Option<Page> {
        let now = std::time::Instant::now();
        let mut kept = self.kept.lock().unwrap_or_else(|e| e.into_inner());
        kept.retain(|k| now.duration_since(k.at) < PAGE_TTL);
        kept.iter().find(|k| k.key == *key).map(|k| {
            let mut page = HttpResponse::new(Full::new(k.body.clone()));
            *page.status_mut() = k.status;
            *page.headers_mut() = k.headers.clone();
            page
        })
    }

    /// `page`, kept for the next [`PAGE_TTL`] when it is one (not an error).
    async fn keep(&self, key: PageKey, page: Page) -> Page {
        if page.status() != StatusCode::OK {
            return page;
        }
        let (parts, body) = page.into_parts();
        let Ok(body) = body.collect().await.map(|b| b.to_bytes());
        let mut kept = self.kept.lock().unwrap_or_else(|e| e.into_inner());
        if kept.len() >= MAX_PAGES {
            kept.pop_front();
        }
        kept.push_back(Kept {
            key,
            at: std::time::Instant::now(),
            status: parts.status,
            headers: parts.headers.clone(),
            body: body.clone(),
        });
        HttpResponse::from_parts(parts, Full::new(body))
    }
}

/// A page [`Pages`] keeps: for whom and what, when, and the page.
struct Kept {
    key: PageKey,
    at: std::time::Instant,
    status: StatusCode,
    headers: HeaderMap,
    body: Bytes,
}

/// Whether a request came from the console's own page: a same-origin `Origin` or
/// `Sec-Fetch-Site` (a form on another site, a sandboxed frame with `Origin: null`, or a
/// client that says neither, is not).
fn same_origin(headers: &HeaderMap) -> bool {
    let fetch_site = headers.get("sec-fetch-site").and_then(|v| v.to_str().ok());
    if let Some(site) = fetch_site {
        return site == "same-origin";
    }
    let origin = headers.get(header::ORIGIN).and_then(|v| v.to_str().ok());
    let host = headers.get(header::HOST).and_then(|v| v.to_str().ok());
    match (origin, host) {
        (Some(o), Some(h)) => o != "null" && o.split_once("://").map(|(_, rest)| rest) == Some(h),
        _ => false,
    }
}

/// Whether the request reached the admin listener through TLS (a proxy in front of it says
/// so): the session cookie is then `Secure`.
fn through_tls(headers: &HeaderMap) -> bool {
    headers
        .get("x-forwarded-proto")
        .and_then(|v| v.to_str().ok())
        .is_some_and(|v| {
            v.split(',')
                .next()
                .is_some_and(|p| p.trim().eq_ignore_ascii_case("https"))
        })
        || headers
            .get("forwarded")
            .and_then(|v| v.to_str().ok())
            .is_some_and(|v| v.to_ascii_lowercase().contains("proto=https"))
}

/// The session cookie's value (its id), if the request carries one.
fn session_id(headers: &HeaderMap) -> Option<String> {
    headers
        .get_all(header::COOKIE)
        .iter()
        .filter_map(|v| v.to_str().ok())
        .flat_map(|v| v.split(';'))
        .filter_map(|c| c.trim().split_once('='))
        .find(|(name, _)| *name == COOKIE)
        .map(|(_, v)| v.to_owned())
        .filter(|v| !v.is_empty())
}

/// Answers one console request (`request` with its body, at most 4 KiB read within the
/// admin listener's body timeout).
pub(crate) async fn answer(
    console: &Console,
    request: HttpRequest<hyper::body::Incoming>,
    remote: Option<SocketAddr>,
) -> Page {
    if !console.hosts.allows(request.headers(), request.uri()) {
        crate::metrics::door_refused("admin", "host");
        return html(
            StatusCode::FORBIDDEN,
            "Forbidden",
            &format!(
                "<p>{}</p>",
                esc(&crate::connect::HostCheck::refusal(request.headers()))
            ),
        );
    }
    let path = request.uri().path().to_owned();
    let query = request.uri().query().unwrap_or("").to_owned();
    let token = token_of(request.headers(), &console.sessions);
    let method = request.method().clone();
    match (method, path.as_str()) {
        (Method::POST, "/login") => {
            // A login from another site's form (login CSRF) is refused: browsers say where
            // a request comes from.
            if !same_origin(request.headers()) {
                return login_page(
                    StatusCode::FORBIDDEN,
                    "a login must come from this console's own page (a same-origin Origin or Sec-Fetch-Site)",
                );
            }
            let secure = through_tls(request.headers());
            let read = Limited::new(request.into_body(), 4096).collect();
            let body = match tokio::time::timeout(BODY_TIMEOUT, read).await {
                Ok(Ok(b)) => b.to_bytes(),
                Ok(Err(_)) => return login_page(StatusCode::BAD_REQUEST, "the form is too large"),
                Err(_) => {
                    crate::metrics::door_refused("admin", "body_timeout");
                    return login_page(
                        StatusCode::REQUEST_TIMEOUT,
                        "the form did not arrive in time",
                    );
                }
            };
            let Ok(_rendering) = console.rendering.try_acquire() else {
                return busy();
            };
            let form = form_values(std::str::from_utf8(&body).unwrap_or(""));
            let token = form
                .get("token")
                .map(String::as_str)
                .unwrap_or("")
                .trim()
                .to_owned();
            // A token's characters (RFC 6750 b64token): nothing that could end the cookie
            // value or add an attribute to it.
            let b64token = |c: char| c.is_ascii_alphanumeric() || "-._~+/=".contains(c);
            if token.is_empty() || !token.chars().all(b64token) {
                return login_page(StatusCode::BAD_REQUEST, "give a bearer token");
            }
            // The token is tried on the API, and kept (on the server) only when it is let in.
            match call(
                &console.shared,
                "ListTargets",
                &json!({"pageSize": 1}),
                Some(&token),
                remote,
            )
            .await
            {
                Err(e) => login_page(
                    StatusCode::from_u16(e.status).unwrap_or(StatusCode::UNAUTHORIZED),
                    &e.message,
                ),
                Ok(_) => {
                    let Some(id) = console.sessions.start(token) else {
                        return login_page(
                            StatusCode::INTERNAL_SERVER_ERROR,
                            "no session could be started",
                        );
                    };
                    let mut r = redirect("/");
                    let secure = if secure { "; Secure" } else { "" };
                    if let Ok(v) = HeaderValue::from_str(&format!(
                        "{COOKIE}={id}; Path=/; HttpOnly; SameSite=Strict{secure}"
                    )) {
                        r.headers_mut().insert(header::SET_COOKIE, v);
                    }
                    r
                }
            }
        }
        (Method::GET | Method::HEAD, "/login") => login_page(StatusCode::OK, ""),
        (Method::GET | Method::HEAD | Method::POST, "/logout") => {
            if let Some(id) = session_id(request.headers()) {
                console.sessions.end(&id);
            }
            let mut r = redirect("/login");
            r.headers_mut().insert(
                header::SET_COOKIE,
                HeaderValue::from_static(
                    "autoscaled_session=; Path=/; HttpOnly; SameSite=Strict; Max-Age=0",
                ),
            );
            r
        }
        (Method::GET | Method::HEAD, p) if p == "/" || p.starts_with("/targets/") => {
            // Authenticated first (a session, or a token the API checks), then a page
            // rendered moments ago for the same caller, else a permit to render.
            if console.login && token.is_none() {
                return redirect("/login");
            }
            let q = form_values(&query);
            let wanted = format!(
                "{p}?{}&{}",
                q.get("prefix").map_or("", String::as_str),
                q.get("sort").map_or("", String::as_str)
            );
            let key = (token.clone(), wanted);
            if let Some(page) = console.pages.get(&key) {
                return page;
            }
            let Ok(_rendering) = console.rendering.try_acquire() else {
                return busy();
            };
            let page = if p == "/" {
                fleet(&console.shared, &query, token.as_deref(), remote).await
            } else {
                match p.strip_prefix("/targets/").map(percent_decode) {
                    Some(Some(key)) if !key.is_empty() => {
                        target(&console.shared, &key, token.as_deref(), remote).await
                    }
                    _ => html(StatusCode::NOT_FOUND, "Not found", "<p>No such page.</p>"),
                }
            };
            console.pages.keep(key, page).await
        }
        _ => html(
            StatusCode::METHOD_NOT_ALLOWED,
            "Method not allowed",
            "<p>GET, or POST /login.</p>",
        ),
    }
}

fn busy() -> Page {
    html(
        StatusCode::SERVICE_UNAVAILABLE,
        "Busy",
        "<p>Too many console pages are being rendered; try again in a moment.</p>",
    )
}

/// The bearer token of the request: its `authorization` header, else its session's.
fn token_of(headers: &HeaderMap, sessions: &Sessions) -> Option<String> {
    if let Some(v) = headers
        .get(header::AUTHORIZATION)
        .and_then(|v| v.to_str().ok())
        && let Some((scheme, token)) = v.trim().split_once(' ')
        && scheme.eq_ignore_ascii_case("bearer")
    {
        return Some(token.trim().to_owned());
    }
    session_id(headers).and_then(|id| sessions.token(&id))
}

/// One API call through the main listener's layers, as Connect JSON.
async fn call(
    shared: &crate::server::Shared,
    method: &str,
    body: &Value,
    token: Option<&str>,
    remote: Option<SocketAddr>,
) -> Result<Value, CallRefused> {
    let Some(api) = shared.console_api.get() else {
        return Err(CallRefused {
            status: 503,
            code: "unavailable".into(),
            message: "the server is not serving yet".into(),
        });
    };
    let mut request = HttpRequest::new(Body::new(Full::new(Bytes::from(body.to_string()))));
    *request.method_mut() = Method::POST;
    *request.uri_mut() = format!("/autoscaled.v1.HorizontalAutoscaler/{method}")
        .parse()
        .map_err(|_| CallRefused {
            status: 500,
            code: "internal".into(),
            message: "bad path".into(),
        })?;
    request.headers_mut().insert(
        header::CONTENT_TYPE,
        HeaderValue::from_static("application/json"),
    );
    if let Some(v) = token.and_then(|t| HeaderValue::from_str(&format!("Bearer {t}")).ok()) {
        request.headers_mut().insert(header::AUTHORIZATION, v);
    }
    request.extensions_mut().insert(crate::auth::Peer {
        remote,
        identity: None,
    });
    if let Ok(v) = HeaderValue::from_str(&CALL_TIMEOUT.as_millis().to_string()) {
        request.headers_mut().insert("connect-timeout-ms", v);
    }
    let Ok(Ok(response)) = tokio::time::timeout(CALL_TIMEOUT, api.oneshot(request)).await else {
        return Err(CallRefused {
            status: 504,
            code: "deadline_exceeded".into(),
            message: format!("the server did not answer within {CALL_TIMEOUT:?}"),
        });
    };
    let status = response.status().as_u16();
    let bytes = response
        .into_body()
        .collect()
        .await
        .map(http_body_util::Collected::to_bytes)
        .unwrap_or_default();
    let value: Value = serde_json::from_slice(&bytes).unwrap_or(Value::Null);
    if status == 200 {
        Ok(value)
    } else {
        Err(CallRefused {
            status,
            code: value["code"].as_str().unwrap_or("unknown").to_owned(),
            message: value["message"].as_str().unwrap_or("").to_owned(),
        })
    }
}

// ---- pages ---------------------------------------------------------------------------------

fn problem_page(e: &CallRefused) -> Page {
    if e.status == 401 {
        return login_page(StatusCode::UNAUTHORIZED, &e.message);
    }
    let status = StatusCode::from_u16(e.status).unwrap_or(StatusCode::INTERNAL_SERVER_ERROR);
    html(
        status,
        "Error",
        &format!(
            "<p class=error>{}: {}</p><p><a href=\"/\">Fleet</a> · <a href=\"/logout\">Log out</a></p>",
            esc(&e.code),
            esc(&e.message)
        ),
    )
}

fn login_page(status: StatusCode, error: &str) -> Page {
    let error = if error.is_empty() {
        String::new()
    } else {
        format!("<p class=error id=login-error>{}</p>", esc(error))
    };
    html(
        status,
        "Log in",
        &format!(
            "<h1>autoscaled</h1><p>This server asks for a bearer token (the tokens of its authorization file).</p>{error}\
             <form method=post action=\"/login\"><label>Token <input type=password name=token id=token autocomplete=off></label> \
             <button type=submit id=login>Log in</button></form>"
        ),
    )
}

/// How a target stands, for ordering and colour.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
enum Standing {
    Failing,
    Limited,
    AtMax,
    Fine,
}

impl Standing {
    fn of(s: &Value) -> Standing {
        let conditions: &[Value] = s["conditions"].as_array().map_or(&[], Vec::as_slice);
        let is = |t: &str, status: &str| {
            conditions
                .iter()
                .any(|c| c["type"] == t && c["status"] == status)
        };
        let reason_of = |t: &str| {
            conditions
                .iter()
                .find(|c| c["type"] == t)
                .and_then(|c| c["reason"].as_str())
                .unwrap_or("")
                .to_owned()
        };
        if is("AbleToScale", "False")
            || (is("ScalingActive", "False") && reason_of("ScalingActive") != "ScalingDisabled")
        {
            Standing::Failing
        } else if is("ScalingLimited", "True") {
            Standing::Limited
        } else if int(&s["maxReplicas"])
            .is_some_and(|max| int(&s["currentReplicas"]).unwrap_or(0) >= max)
        {
            Standing::AtMax
        } else {
            Standing::Fine
        }
    }

    fn class(self) -> &'static str {
        match self {
            Standing::Failing => "failing",
            Standing::Limited => "limited",
            Standing::AtMax => "atmax",
            Standing::Fine => "fine",
        }
    }
}

async fn fleet(
    shared: &crate::server::Shared,
    query: &str,
    token: Option<&str>,
    remote: Option<SocketAddr>,
) -> Page {
    let q = form_values(query);
    let prefix = q.get("prefix").cloned().unwrap_or_default();
    let by_key = q.get("sort").is_some_and(|s| s == "key");
    let mut summaries: Vec<Value> = Vec::new();
    let mut page_token = String::new();
    let mut truncated = false;
    loop {
        let body = json!({"prefix": prefix, "includeSummaries": true, "pageSize": 1000, "pageToken": page_token});
        let mut page = match call(shared, "ListTargets", &body, token, remote).await {
            Ok(p) => p,
            Err(e) => return problem_page(&e),
        };
        if let Value::Array(page_summaries) = page["summaries"].take() {
            summaries.extend(page_summaries);
        }
        page_token = page["nextPageToken"].as_str().unwrap_or("").to_owned();
        if page_token.is_empty() {
            break;
        }
        if summaries.len() >= MAX_FLEET {
            truncated = true;
            break;
        }
    }
    let mut rows: Vec<(Standing, Value)> = summaries
        .into_iter()
        .map(|s| (Standing::of(&s), s))
        .collect();
    if !by_key {
        rows.sort_by(|a, b| a.0.cmp(&b.0).then_with(|| key_of(&a.1).cmp(key_of(&b.1))));
    }
    let count = |st: Standing| rows.iter().filter(|r| r.0 == st).count();
    let mut out = String::new();
    let _ = write!(
        out,
        "<h1>Targets</h1><form method=get action=\"/\"><label>Key prefix <input name=prefix id=prefix value=\"{}\"></label> \
         <label>Order <select name=sort><option value=problems{}>problems first</option><option value=key{}>by key</option></select></label> \
         <button type=submit>Show</button></form>\
         <p id=counts>{} target{}: <span class=failing>{} failing</span>, <span class=limited>{} limited</span>, <span class=atmax>{} at their maximum</span>{}</p>",
        esc(&prefix),
        if by_key { "" } else { " selected" },
        if by_key { " selected" } else { "" },
        rows.len(),
        if rows.len() == 1 { "" } else { "s" },
        count(Standing::Failing),
        count(Standing::Limited),
        count(Standing::AtMax),
        if truncated {
            format!(" (the first {MAX_FLEET} shown)")
        } else {
            String::new()
        },
    );
    out.push_str("<table id=fleet><thead><tr><th>Target</th><th>Replicas</th><th>Min</th><th>Max</th><th>Metrics (current / target)</th><th>Conditions</th><th>Last decision</th><th>Runs</th></tr></thead><tbody>");
    for (standing, s) in &rows {
        let key = key_of(s);
        let current = int(&s["currentReplicas"]).unwrap_or(0);
        let desired = int(&s["desiredReplicas"]).unwrap_or(0);
        let _ = write!(
            out,
            "<tr class={}><td><a href=\"/targets/{}\">{}</a>{}</td><td>{current} → {desired}</td><td>{}</td><td>{}</td><td>{}</td><td>{}</td><td>{}</td><td>{}</td></tr>",
            standing.class(),
            percent_encode(key),
            esc(key),
            if s["shadow"] == true {
                " <span class=shadow title=\"decisions recorded as if applied; nothing scaled\">shadow</span>"
            } else {
                ""
            },
            int(&s["minReplicas"]).map_or("-".into(), |v| v.to_string()),
            int(&s["maxReplicas"]).map_or("-".into(), |v| v.to_string()),
            metrics_cell(s),
            conditions_cell(s),
            esc(s["evaluationTime"].as_str().unwrap_or("-")),
            int(&s["runCount"]).unwrap_or(0),
        );
    }
    out.push_str("</tbody></table>");
    html_page(StatusCode::OK, "Targets", &out, true)
}

fn key_of(s: &Value) -> &str {
    s["targetKey"].as_str().unwrap_or("")
}

/// `cpu 92% / 50%` per metric.
fn metrics_cell(s: &Value) -> String {
    let mut parts = Vec::new();
    for m in s["metrics"].as_array().into_iter().flatten() {
        let status = &m["status"];
        let name = status["name"].as_str().unwrap_or("?");
        let (current, target) = metric_values(status, &m["target"]);
        let current = current.map_or_else(
            || esc(status["errorReason"].as_str().unwrap_or("<unknown>")),
            fmt_num,
        );
        let target = target.map_or("-".into(), fmt_num);
        let unit = if m["target"]["type"] == "METRIC_TARGET_TYPE_UTILIZATION" {
            "%"
        } else {
            ""
        };
        parts.push(format!("{} {current}{unit} / {target}{unit}", esc(name)));
    }
    parts.join("<br>")
}

/// The current value and the target of a metric, in the target's unit (percent, or units).
fn metric_values(status: &Value, target: &Value) -> (Option<f64>, Option<f64>) {
    match target["type"].as_str().unwrap_or("") {
        "METRIC_TARGET_TYPE_UTILIZATION" => (
            int(&status["currentAverageUtilization"]).map(|v| v as f64),
            int(&target["averageUtilization"]).map(|v| v as f64),
        ),
        "METRIC_TARGET_TYPE_AVERAGE_VALUE" => (
            int(&status["currentAverageValueMilli"]).map(|v| v as f64 / 1000.0),
            int(&target["averageValueMilli"]).map(|v| v as f64 / 1000.0),
        ),
        _ => (
            int(&status["currentValueMilli"])
                .or_else(|| int(&status["currentAverageValueMilli"]))
                .map(|v| v as f64 / 1000.0),
            int(&target["valueMilli"]).map(|v| v as f64 / 1000.0),
        ),
    }
}

/// Whether a condition is in the state it has when nothing is wrong or limited: AbleToScale
/// and ScalingActive True, ScalingLimited False, ScaledToZero False (the HPAScaleToZero gate
/// keeps that condition on every target, mostly False).
fn usual(kind: &str, status: &str) -> bool {
    match kind {
        "AbleToScale" | "ScalingActive" => status == "True",
        "ScalingLimited" | "ScaledToZero" => status == "False",
        _ => false,
    }
}

/// The conditions that are not as they usually are, and the AbleToScale reason.
fn conditions_cell(s: &Value) -> String {
    let mut parts = Vec::new();
    for c in s["conditions"].as_array().into_iter().flatten() {
        let t = c["type"].as_str().unwrap_or("");
        let st = c["status"].as_str().unwrap_or("");
        if !usual(t, st) || t == "AbleToScale" {
            parts.push(format!(
                "<span title=\"{}\">{} {}</span>",
                esc(c["message"].as_str().unwrap_or("")),
                esc(t),
                esc(c["reason"].as_str().unwrap_or(""))
            ));
        }
    }
    parts.join("<br>")
}

async fn target(
    shared: &crate::server::Shared,
    key: &str,
    token: Option<&str>,
    remote: Option<SocketAddr>,
) -> Page {
    let history = match call(
        shared,
        "GetHistory",
        &json!({"targetKey": key}),
        token,
        remote,
    )
    .await
    {
        Ok(h) => h,
        Err(e) => return problem_page(&e),
    };
    // The summary (one read) for the targets of the spec in force.
    let summary = call(
        shared,
        "ListTargets",
        &json!({"prefix": key, "includeSummaries": true, "pageSize": 1}),
        token,
        remote,
    )
    .await
    .ok()
    .and_then(|l| l["summaries"].as_array().and_then(|a| a.first().cloned()))
    .filter(|s| key_of(s) == key)
    .unwrap_or(Value::Null);
    let runs: &[Value] = history["decisions"].as_array().map_or(&[], Vec::as_slice);
    let mut out = String::new();
    let _ = write!(
        out,
        "<p><a href=\"/\">← Targets</a></p><h1 id=target-key>{}</h1>",
        esc(key)
    );
    if let Some(newest) = runs.last() {
        let current = int(&newest["currentReplicas"]).unwrap_or(0);
        let desired = int(&newest["desiredReplicas"]).unwrap_or(0);
        let e = &newest["explanation"];
        let _ = write!(
            out,
            "<p class={} id=now>Now: {current} → {desired} replicas (min {}, max {}), decided by the {} path at {}{}</p>",
            Standing::of(&summary).class(),
            int(&summary["minReplicas"]).map_or("-".into(), |v| v.to_string()),
            int(&summary["maxReplicas"]).map_or("-".into(), |v| v.to_string()),
            esc(e["path"].as_str().unwrap_or("?")),
            esc(newest["evaluationTime"].as_str().unwrap_or("")),
            e["rescaleReason"]
                .as_str()
                .filter(|r| !r.is_empty())
                .map_or(String::new(), |r| format!(": {}", esc(r)))
        );
        if newest["shadow"] == true {
            out.push_str("<p id=mode>Shadow mode: these decisions are recorded as if applied; the caller scales nothing (a live call starts the target afresh).</p>");
        }
        // The policy the spec came from, and what the target's scaling group allowed.
        if let Some(name) = newest["policy"]["name"].as_str() {
            let _ = write!(
                out,
                "<p id=policy>Policy: {} (version {})</p>",
                esc(name),
                int(&newest["policy"]["version"]).unwrap_or(0)
            );
        }
        let b = &newest["budget"];
        if let Some(group) = b["group"].as_str() {
            let _ = write!(
                out,
                "<p id=budget>Scaling group {}: {} uncapped, fair share {}, {} of {} units held ({} left, {} per replica)</p>",
                esc(group),
                int(&b["uncappedReplicas"]).unwrap_or(0),
                int(&b["fairShare"]).unwrap_or(0),
                int(&b["used"]).unwrap_or(0),
                int(&b["capacity"]).unwrap_or(0),
                int(&b["residual"]).unwrap_or(0),
                int(&b["unitsPerReplica"]).unwrap_or(0)
            );
        }
        // What the schedules set, and when that changes next.
        let sched = &newest["schedule"];
        if sched.is_object() {
            let names = |field: &str| -> Vec<String> {
                sched[field]
                    .as_array()
                    .into_iter()
                    .flatten()
                    .filter_map(|v| v.as_str().map(esc))
                    .collect()
            };
            let open = names("applied");
            let next = sched["nextChangeLocal"]
                .as_str()
                .filter(|t| !t.is_empty())
                .map_or("none within 366 days".to_owned(), esc);
            let _ = write!(
                out,
                "<p id=schedules>Schedules: {}; bounds in force: min {}, max {}{}. Next change: {}</p>",
                if open.is_empty() {
                    "none open".to_owned()
                } else {
                    format!("{} open", open.join(", "))
                },
                int(&sched["minReplicas"]).unwrap_or(0),
                int(&sched["maxReplicas"]).unwrap_or(0),
                if sched["conflict"] == true {
                    " (a floor above a ceiling: the floor wins)"
                } else {
                    ""
                },
                next
            );
        }
        // What predictive scale-up did, and how accurate its forecaster has been.
        let p = &newest["predictive"];
        if p.is_object() {
            let number = |v: &Value| v.as_f64();
            let _ = write!(
                out,
                "<p id=predictive>Predictive ({}): {}; load {} replicas at target, forecast {} (asks {}, reactive {}); accuracy {}</p>",
                esc(p["mode"].as_str().unwrap_or("")),
                esc(p["reason"].as_str().unwrap_or("")),
                number(&p["load"]).map_or("-".to_owned(), |v| format!("{v:.1}")),
                number(&p["forecastLoad"]).map_or("-".to_owned(), |v| format!("{v:.1}")),
                int(&p["forecastReplicas"]).map_or("-".to_owned(), |v| v.to_string()),
                int(&p["reactiveReplicas"]).map_or("-".to_owned(), |v| v.to_string()),
                number(&p["wape"]).map_or("not scored yet".to_owned(), |w| format!(
                    "WAPE {:.1}% over about a day",
                    w * 100.0
                )),
            );
        }
        out.push_str("<table class=conditions><tr><th>Condition</th><th>Status</th><th>Reason</th><th>Message</th></tr>");
        for c in newest["conditions"].as_array().into_iter().flatten() {
            let _ = write!(
                out,
                "<tr><td>{}</td><td>{}</td><td>{}</td><td>{}</td></tr>",
                esc(c["type"].as_str().unwrap_or("")),
                esc(c["status"].as_str().unwrap_or("")),
                esc(c["reason"].as_str().unwrap_or("")),
                esc(c["message"].as_str().unwrap_or(""))
            );
        }
        out.push_str("</table>");
    }
    out.push_str(&replica_chart(runs));
    let targets: &[Value] = summary["metrics"].as_array().map_or(&[], Vec::as_slice);
    let metric_count = runs
        .last()
        .and_then(|r| r["metrics"].as_array())
        .map_or(0, Vec::len);
    for i in 0..metric_count {
        let target = targets
            .get(i)
            .map(|m| m["target"].clone())
            .unwrap_or(Value::Null);
        out.push_str(&metric_chart(runs, i, &target));
    }
    out.push_str(&runs_table(runs));
    html_page(StatusCode::OK, key, &out, true)
}

/// An integer of proto3 JSON (64-bit integers are strings there).
fn int(v: &Value) -> Option<i64> {
    v.as_i64()
        .or_else(|| v.as_str().and_then(|s| s.parse().ok()))
}

fn fmt_num(v: f64) -> String {
    if (v - v.round()).abs() < 1e-9 {
        format!("{}", v.round() as i64)
    } else {
        format!("{v:.2}")
    }
}

fn percent_encode(s: &str) -> String {
    let mut out = String::new();
    for b in s.bytes() {
        if b.is_ascii_alphanumeric() || b"-._~".contains(&b) {
            out.push(char::from(b));
        } else {
            let _ = write!(out, "%{b:02X}");
        }
    }
    out
}

fn percent_decode(s: &str) -> Option<String> {
    let bytes = s.as_bytes();
    let mut out = Vec::with_capacity(bytes.len());
    let mut i = 0;
    while i < bytes.len() {
        match bytes[i] {
            b'%' => {
                let hex = std::str::from_utf8(bytes.get(i + 1..i + 3)?).ok()?;
                out.push(u8::from_str_radix(hex, 16).ok()?);
                i += 3;
            }
            b'+' => {
                out.push(b' ');
                i += 1;
            }
            b => {
                out.push(b);
                i += 1;
            }
        }
    }
    String::from_utf8(out).ok()
}

fn form_values(text: &str) -> std::collections::HashMap<String, String> {
    text.split('&')
        .filter_map(|kv| kv.split_once('='))
        .filter_map(|(k, v)| Some((percent_decode(k)?, percent_decode(v)?)))
        .collect()
}

fn redirect(to: &'static str) -> Page {
    let mut r = HttpResponse::new(Full::new(Bytes::new()));
    *r.status_mut() = StatusCode::SEE_OTHER;
    r.headers_mut()
        .insert(header::LOCATION, HeaderValue::from_static(to));
    r
}

const STYLE: &str = "body{font-family:sans-serif;margin:1.5em;color:#222}table{border-collapse:collapse;margin:.5em 0}td,th{border:1px solid #ccc;padding:3px 8px;font-size:13px;text-align:left;vertical-align:top}th{background:#f0f0f0}\
span.shadow{background:#e0ecf8;border-radius:3px;padding:0 4px;font-size:12px}tr.failing td,p.failing,span.failing{background:#fde2e2}tr.limited td,p.limited,span.limited{background:#fff3cd}tr.atmax td,p.atmax,span.atmax{background:#e8e0f8}.error{color:#b00020}h2{font-size:16px;margin-top:1.2em}a{color:#0b57d0}";

/// A page that does not refresh itself (the login form, errors).
fn html(status: StatusCode, title: &str, body: &str) -> Page {
    html_page(status, title, body, false)
}

/// A page; `refresh`: it reloads itself every few seconds (the fleet and a target).
fn html_page(status: StatusCode, title: &str, body: &str, refresh: bool) -> Page {
    let (meta, note) = if refresh {
        (
            format!("<meta http-equiv=refresh content=\"{REFRESH_SECS}\">"),
            format!(" · refreshes every {REFRESH_SECS} s"),
        )
    } else {
        (String::new(), String::new())
    };
    let page = format!(
        "<!doctype html><html lang=en><head><meta charset=utf-8>{meta}<title>{} · autoscaled</title><style>{STYLE}</style></head><body>{body}<p style=\"color:#777;font-size:11px\">autoscaled {}{note} · <a href=\"/logout\">log out</a></p></body></html>",
        esc(title),
        env!("CARGO_PKG_VERSION"),
    );
    let mut r = HttpResponse::new(Full::new(Bytes::from(page)));
    *r.status_mut() = status;
    let h = r.headers_mut();
    h.insert(
        header::CONTENT_TYPE,
        HeaderValue::from_static("text/html; charset=utf-8"),
    );
    // No script, no frames, nothing from elsewhere.
    h.insert(
        header::CONTENT_SECURITY_POLICY,
        HeaderValue::from_static("default-src 'none'; style-src 'unsafe-inline'; img-src 'self'; form-action 'self'; frame-ancestors 'none'"),
    );
    h.insert(
        header::X_CONTENT_TYPE_OPTIONS,
        HeaderValue::from_static("nosniff"),
    );
    h.insert(header::CACHE_CONTROL, HeaderValue::from_static("no-store"));
    r
}

#[cfg(test)]
mod tests;
