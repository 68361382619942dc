//! The dashboard `flare serve` serves: the jobs list and a page per job, updating live.
//!
//! The pages themselves hold no data (they are served without a token): a small script
//! asks for the token once (or takes it from the URL's `#token=` fragment, which never
//! reaches a server log), keeps it for the browser tab, and every two seconds fetches the
//! page's content from `/api/ui/...` (bearer token, like the rest of the API) and puts
//! it in place. That content is HTML the server renders with the components of the
//! offline report (`flare_report::render_sections`): the same verdict, findings with
//! their decisive evidence and action, iteration-time chart and per-rank heatmap, over a
//! live job's windows. Every string that comes from agents (job ids, op names, stack
//! frames, summaries) is escaped there; the pages' Content-Security-Policy allows only
//! the server's own script, so markup that slipped through could still not run.

mod fragments;

pub(crate) use fragments::{job_fragment, jobs_fragment, JobPage};

/// Perfetto's public UI, where the dashboard opens timelines unless told otherwise.
pub const PERFETTO_UI: &str = "https://ui.perfetto.dev";

/// A Perfetto UI's URL as the page uses it (no trailing `/`): http or https, a host, no
/// credentials, query or fragment. The page opens it and posts a timeline to its origin
/// alone.
pub(crate) fn perfetto_ui(url: &str) -> Result<String, String> {
    let bad = |why: &str| format!("--perfetto-url {url:?}: {why}");
    let uri: axum::http::Uri = url.parse().map_err(|e| bad(&format!("{e}")))?;
    if !matches!(uri.scheme_str(), Some("http" | "https")) {
        return Err(bad("expected an http:// or https:// URL"));
    }
    let Some(authority) = uri.authority() else {
        return Err(bad("expected a host"));
    };
    if authority.as_str().contains('@') || uri.query().is_some() || url.contains('#') {
        return Err(bad("expected no credentials, query or fragment"));
    }
    Ok(url.trim_end_matches('/').to_string())
}

use axum::http::{header, HeaderValue};
use axum::response::{IntoResponse, Response};

const SHELL: &str = r#"<!DOCTYPE html>
<html lang="en">
<head>
<meta charset="utf-8">
<meta name="viewport" content="width=device-width, initial-scale=1">
<title>Flare</title>
<link rel="stylesheet" href="/ui/style.css">
<script src="/ui/app.js" defer></script>
</head>
<body>
<main>
<header>
<h1><a href="/" class="home">Flare</a></h1>
<p class="subtitle" id="status">loading…</p>
</header>
<form id="login" hidden>
<section>
<h2>Token</h2>
<p class="note" id="login-why">A read token of this server (flare serve --read-token) or its operator token. Kept for this browser tab only.</p>
<input id="token" type="password" autocomplete="off" size="40">
<button type="submit">Open</button>
</section>
</form>
<div id="content" data-refreshes="0"></div>
</main>
</body>
</html>
"#;

const APP_JS: &str = r#"'use strict';
(function () {
  const KEY = 'flare-token';
  const fromUrl = location.hash.match(/(?:^#|&)token=([^&]*)/);
  if (fromUrl) {
    sessionStorage.setItem(KEY, decodeURIComponent(fromUrl[1]));
    history.replaceState(null, '', location.pathname + location.search);
  }
  const job = location.pathname.match(/^\/jobs\/([^/]+)$/);
  // The path segment is already percent-encoded as the link wrote it.
  const source = job ? '/api/ui/jobs/' + job[1] : '/api/ui/jobs';
  const content = document.getElementById('content');
  const status = document.getElementById('status');
  const login = document.getElementById('login');
  function showLogin(why) {
    login.hidden = false;
    if (why) document.getElementById('login-why').textContent = why;
    status.textContent = 'a token is needed';
  }
  login.addEventListener('submit', function (e) {
    e.preventDefault();
    sessionStorage.setItem(KEY, document.getElementById('token').value);
    login.hidden = true;
    refresh();
  });
  let busy = false;
  async function refresh() {
    const token = sessionStorage.getItem(KEY);
    if (!token) { showLogin(); return; }
    if (busy) return;
    busy = true;
    try {
      const r = await fetch(source, { headers: { Authorization: 'Bearer ' + token }, cache: 'no-store' });
      if (r.status === 401) {
        sessionStorage.removeItem(KEY);
        showLogin('The server refused that token.');
        return;
      }
      const body = await r.text();
      if (!r.ok) {
        let why = body;
        try { why = JSON.parse(body).error; } catch (_) {}
        status.textContent = 'error ' + r.status + ': ' + why;
        return;
      }
      content.innerHTML = body;
      content.dataset.refreshes = String(Number(content.dataset.refreshes) + 1);
      status.textContent = 'live, updated ' + new Date().toLocaleTimeString();
    } catch (e) {
      status.textContent = 'server unreachable, retrying';
    } finally {
      busy = false;
    }
  }
  // The timeline links: fetched with the token, then saved, or posted to Perfetto's UI
  // (the server's --perfetto-url) once it answers (its documented postMessage handshake:
  // PING until PONG), to its origin only.
  content.addEventListener('click', async function (e) {
    const a = e.target.closest('a[data-timeline]');
    if (!a) return;
    e.preventDefault();
    const ui = a.dataset.perfetto;
    const origin = ui ? new URL(ui).origin : null;
    const perfetto = a.dataset.action === 'perfetto' ? window.open(ui + '/#!/') : null;
    const r = await fetch(a.dataset.timeline, { headers: { Authorization: 'Bearer ' + sessionStorage.getItem(KEY) }, cache: 'no-store' });
    if (!r.ok) { status.textContent = 'timeline: error ' + r.status; if (perfetto) perfetto.close(); return; }
    const buffer = await r.arrayBuffer();
    const name = (r.headers.get('Content-Disposition') || '').match(/filename="([^"]+)"/);
    const title = name ? name[1] : 'flare-timeline.json';
    if (!perfetto) {
      const link = document.createElement('a');
      link.href = URL.createObjectURL(new Blob([buffer], { type: 'application/json' }));
      link.download = title;
      document.body.appendChild(link);
      link.click();
      link.remove();
      status.textContent = 'timeline saved as ' + title;
      document.body.dataset.timelineSaved = title;
      return;
    }
    let answered = false;
    function onMessage(m) {
      if (m.source !== perfetto || m.data !== 'PONG') return;
      answered = true;
      window.removeEventListener('message', onMessage);
      perfetto.postMessage({ perfetto: { buffer: buffer, title: title } }, origin);
    }
    window.addEventListener('message', onMessage);
    const ping = setInterval(function () {
      if (answered || perfetto.closed) { clearInterval(ping); return; }
      perfetto.postMessage('PING', origin);
    }, 250);
  });
  refresh();
  setInterval(refresh, 2000);
})();
"#;

const EXTRA_CSS: &str = r#"
a.home{color:inherit;text-decoration:none}
#login input{font:inherit;padding:4px 8px;margin-right:8px}
table.jobs td a{color:var(--info);text-decoration:none;font-weight:600}
.health{display:inline-block;padding:1px 8px;border-radius:10px;color:#fff;font-size:12px;font-weight:600;background:var(--muted)}
.health.healthy{background:var(--ok)}
.health.warning,.health.unhealthy{background:var(--warn)}
.health.critical{background:var(--crit)}
.alerts li{margin:2px 0}
"#;

/// The headers every dashboard page and fragment carries.
fn secure(mut r: Response, content_type: &'static str) -> Response {
    let h = r.headers_mut();
    h.insert(header::CONTENT_TYPE, HeaderValue::from_static(content_type));
    h.insert(
        header::CONTENT_SECURITY_POLICY,
        HeaderValue::from_static(
            "default-src 'none'; script-src 'self'; style-src 'self' 'unsafe-inline'; img-src 'self' data:; connect-src 'self'; form-action 'self'; base-uri 'none'; frame-ancestors 'none'",
        ),
    );
    // nosniff and no-store: on every reply (`api::safe_headers`).
    r
}

/// A page: the shell, whatever the path (the script reads it).
pub(crate) async fn page() -> Response {
    secure(SHELL.into_response(), "text/html; charset=utf-8")
}

pub(crate) async fn app_js() -> Response {
    secure(APP_JS.into_response(), "text/javascript; charset=utf-8")
}

pub(crate) async fn style_css() -> Response {
    let css = format!("{}{EXTRA_CSS}", flare_report::STYLE);
    secure(css.into_response(), "text/css; charset=utf-8")
}

/// A fragment the script puts in place.
pub(crate) fn html(fragment: String) -> Response {
    secure(fragment.into_response(), "text/html; charset=utf-8")
}

#[cfg(test)]
mod tests {
    use super::perfetto_ui;

    #[test]
    fn a_perfetto_ui_is_an_http_url_without_credentials_query_or_fragment() {
        for (url, want) in [
            ("https://ui.perfetto.dev", Ok("https://ui.perfetto.dev")),
            ("https://ui.perfetto.dev/", Ok("https://ui.perfetto.dev")),
            (
                "http://perfetto.internal:10000/ui/",
                Ok("http://perfetto.internal:10000/ui"),
            ),
            ("ftp://ui.perfetto.dev", Err("http:// or https://")),
            ("ui.perfetto.dev", Err("http:// or https://")),
            ("https://user:pw@ui.perfetto.dev", Err("no credentials")),
            ("https://ui.perfetto.dev/?x=1", Err("no credentials")),
            ("https://ui.perfetto.dev/#!/", Err("no credentials")),
            ("https://ui perfetto", Err("--perfetto-url")),
        ] {
            match (perfetto_ui(url), want) {
                (Ok(got), Ok(w)) => assert_eq!(got, w, "{url}"),
                (Err(e), Err(w)) => {
                    assert!(e.contains(w) && e.contains("--perfetto-url"), "{url}: {e}")
                }
                (got, w) => panic!("{url}: {got:?}, expected {w:?}"),
            }
        }
    }
}
