// The dlm dashboard. It follows the server's feed (v1/events, Server-Sent
// Events carrying JSON snapshots) and redraws the page from each snapshot.
// A snapshot is a dlm.v1.EventSnapshot of api/dlm.proto in protobuf's JSON
// mapping: 64-bit integers (ids, tokens, counts) are strings, modes and
// states are enum names (MODE_EX), times RFC 3339 strings and durations
// seconds ("60s"); a field that does not apply is absent.
//
// Names, labels and metadata come from clients and are untrusted: they are
// only ever set as text (textContent, text nodes, dataset), never as markup.
//
// When the server wants credentials (v1/whoami answers 401), the page asks
// for a token and trades it for an HttpOnly session cookie (POST v1/login,
// the token in the Authorization header); EventSource then sends the
// cookie. The token is not kept.
'use strict';

(() => {
  const feedPath = 'v1/events'; // relative: the page may be mounted under a prefix
  const retryAfterMs = 3000;    // after the feed refused or failed
  const staleAfterMs = 5000;    // the server sends at least one event a second

  const $ = (id) => document.getElementById(id);

  let source = null;
  let retryTimer = 0;
  let lastEventAt = 0;
  let prefix = new URLSearchParams(location.search).get('prefix') || '';

  // el builds an element: props may set className, title and data-*
  // attributes (dataset); children are nodes or strings (made text nodes).
  function el(tag, props, ...children) {
    const e = document.createElement(tag);
    if (props) {
      if (props.className) e.className = props.className;
      if (props.title) e.title = props.title;
      if (props.data) {
        for (const [k, v] of Object.entries(props.data)) e.dataset[k] = String(v);
      }
    }
    for (const c of children) {
      if (c === null || c === undefined) continue;
      e.append(c instanceof Node ? c : document.createTextNode(String(c)));
    }
    return e;
  }

  function setText(id, text) {
    $(id).textContent = text;
  }

  function pad2(n) {
    return String(n).padStart(2, '0');
  }

  // duration formats milliseconds: 850 ms, 4.2 s, 37 s, 3m 07s, 2h 05m.
  function duration(ms) {
    if (ms === undefined || ms === null) return '–';
    if (ms < 0) ms = 0;
    if (ms < 1000) return `${Math.round(ms)} ms`;
    const s = ms / 1000;
    if (s < 10) return `${s.toFixed(1)} s`;
    if (s < 60) return `${Math.floor(s)} s`;
    const m = Math.floor(s / 60);
    if (m < 60) return `${m}m ${pad2(Math.floor(s % 60))}s`;
    const h = Math.floor(m / 60);
    if (h < 48) return `${h}h ${pad2(m % 60)}m`;
    return `${Math.floor(h / 24)}d ${pad2(h % 24)}h`;
  }

  // ms returns the milliseconds of a protobuf Duration in JSON ("1.500s"),
  // undefined if it is absent.
  function ms(d) {
    return d === undefined ? undefined : parseFloat(d) * 1000;
  }

  // since returns the milliseconds from the RFC 3339 time t to now (ms),
  // undefined if t is absent.
  function since(now, t) {
    return t === undefined ? undefined : now - Date.parse(t);
  }

  // modeName shows a mode by its short name: MODE_EX is EX.
  function modeName(m) {
    return m === undefined ? undefined : m.replace(/^MODE_/, '');
  }

  function setConn(state, text) {
    const c = $('conn');
    c.dataset.state = state;
    c.textContent = text;
  }

  // --- credentials ----------------------------------------------------------

  // start asks the server who we are: it shows the login form on 401, else
  // follows the feed.
  async function start() {
    clearTimeout(retryTimer);
    let resp;
    try {
      resp = await fetch('v1/whoami', { cache: 'no-store', credentials: 'same-origin' });
    } catch (err) {
      setConn('down', 'server unreachable; retrying…');
      retryTimer = setTimeout(start, retryAfterMs);
      return;
    }
    if (resp.status === 401) {
      if (source) source.close();
      source = null;
      document.body.dataset.auth = 'login';
      $('login-section').hidden = false;
      $('whoami').hidden = true;
      setConn('down', 'sign in to follow the server');
      $('token').focus();
      return;
    }
    document.body.dataset.auth = '';
    $('login-section').hidden = true;
    if (resp.ok) {
      const who = await resp.json().catch(() => ({}));
      $('whoami').hidden = !who.auth;
      $('identity').textContent = who.identity || '';
    }
    connect();
  }

  $('login').addEventListener('submit', async (ev) => {
    ev.preventDefault();
    const input = $('token');
    const token = input.value.trim();
    input.value = '';
    const err = $('login-error');
    err.hidden = true;
    let resp;
    try {
      resp = await fetch('v1/login', { method: 'POST', headers: { Authorization: `Bearer ${token}` }, credentials: 'same-origin' });
    } catch (e) {
      err.textContent = `cannot reach the server: ${e}`;
      err.hidden = false;
      return;
    }
    if (!resp.ok) {
      err.textContent = resp.status === 401 ? 'token refused' : `login failed: ${resp.status}`;
      err.hidden = false;
      return;
    }
    start();
  });

  $('logout').addEventListener('click', async () => {
    await fetch('v1/logout', { method: 'POST', credentials: 'same-origin' }).catch(() => {});
    start();
  });

  // --- the feed -----------------------------------------------------------

  function connect() {
    clearTimeout(retryTimer);
    if (source) source.close();
    const url = prefix ? `${feedPath}?prefix=${encodeURIComponent(prefix)}` : feedPath;
    setConn('connecting', 'connecting…');
    const es = new EventSource(url);
    source = es;
    es.addEventListener('snapshot', (ev) => {
      if (es !== source) return;
      lastEventAt = Date.now();
      let snap;
      try {
        snap = JSON.parse(ev.data);
      } catch (err) {
        setConn('error', `bad event: ${err}`);
        return;
      }
      setConn('live', 'live');
      render(snap);
    });
    es.onerror = () => {
      if (es !== source) return;
      if (es.readyState === EventSource.CLOSED) {
        // Refused (too many streams, bad request) or the server is gone:
        // EventSource gives up, so try again later.
        // start, not connect: the refusal may be a login that ended.
        setConn('down', 'disconnected; retrying…');
        retryTimer = setTimeout(start, retryAfterMs);
      } else {
        setConn('connecting', 'reconnecting…');
      }
    };
  }

  setInterval(() => {
    if (lastEventAt && source && source.readyState === EventSource.OPEN && Date.now() - lastEventAt > staleAfterMs) {
      setConn('stale', `no update for ${duration(Date.now() - lastEventAt)}`);
    }
  }, 1000);

  // --- rendering ------------------------------------------------------------

  function render(s) {
    const st = s.status;
    const now = Date.parse(st.now);
    document.body.dataset.prefix = s.prefix || '';
    document.body.dataset.applied = String(st.applied_index);
    document.title = `dlm · ${st.node_id}`;
    setText('node-id', st.node_id);
    setText('node-role', `${st.raft_state}${st.ready ? ', serving' : ''}`);
    setText('leader', st.leader_id ? `${st.leader_id} (${st.leader_address})` : 'none known');
    setText('version', st.build ? st.build.version : '–');
    setText('applied', String(st.applied_index));
    setText('updated', new Date(now).toLocaleTimeString());
    setText('stats', `${st.sessions} sessions · ${st.resources} resources · ${st.locks} locks · ` +
      `${st.pending} waiting · last token ${st.last_token}`);

    renderMembers(s.members || [], s.members_hidden);
    const labels = new Map((s.sessions || []).map((x) => [x.id, x.label]));
    renderResources(s, labels, now);
    renderSessions(s, now);
  }

  function renderMembers(members, hidden) {
    const rows = members.map((m) => {
      const role = [];
      role.push(m.leader ? el('span', { className: 'badge leader' }, 'leader') : 'follower');
      if (m.self) role.push(' ', el('span', { className: 'badge self' }, 'this node'));
      return el('tr', { className: m.leader ? 'member leader' : 'member', data: { member: m.id } },
        el('td', null, m.id), el('td', null, m.address), el('td', null, m.suffrage), el('td', null, ...role));
    });
    if (rows.length === 0) {
      rows.push(el('tr', null, el('td', { className: 'empty' },
        hidden ? 'not shown: the members need the admin permission' : 'no configuration known')));
    }
    $('members').tBodies[0].replaceChildren(...rows);
  }

  function sessionCell(id, labels) {
    const label = labels.get(id);
    return el('td', { className: 'session' }, `#${id}`, label ? el('span', { className: 'label' }, ` ${label}`) : null);
  }

  function lockRow(kind, position, l, labels, now) {
    let role, mode, time;
    switch (kind) {
      case 'holder':
        role = 'holder';
        mode = modeName(l.mode) || `${l.permits} permit${l.permits === 1 ? '' : 's'}`;
        time = `held ${duration(since(now, l.granted_at))}`;
        break;
      case 'converting':
        role = `converting #${position}`;
        mode = `${modeName(l.mode)} → ${modeName(l.requested)}`;
        time = `waiting ${duration(since(now, l.queued_at))}`;
        break;
      default:
        role = `waiting #${position}`;
        mode = modeName(l.requested) || `${l.permits} permit${l.permits === 1 ? '' : 's'}`;
        time = `waiting ${duration(since(now, l.queued_at))}`;
    }
    const deadline = l.deadline !== undefined ? `times out in ${duration(-since(now, l.deadline))}` : '';
    return el('tr', { className: kind, data: { session: l.session, lock: l.lock_id, label: labels.get(l.session) || '' } },
      el('td', { className: 'role' }, role),
      sessionCell(l.session, labels),
      el('td', { className: 'mode' }, mode),
      el('td', { className: 'token' }, l.token ? `token ${l.token}` : ''),
      el('td', { className: 'time' }, time),
      el('td', { className: 'deadline' }, deadline),
      el('td', { className: 'meta', title: l.metadata || '' }, l.metadata || ''));
  }

  function more(shown, total, what) {
    if (total <= shown) return null;
    return el('tr', { className: 'more' }, el('td', { className: 'note' }, `… ${total - shown} more ${what}`));
  }

  function renderResources(s, labels, now) {
    const cards = (s.resources || []).map((r) => {
      const kind = r.semaphore ? `semaphore ${r.used}/${r.capacity}` : 'lock';
      const rows = [];
      r.holders.forEach((l, i) => rows.push(lockRow('holder', i + 1, l, labels, now)));
      rows.push(more(r.holders.length, r.holders_total, 'holders'));
      r.converting.forEach((l, i) => rows.push(lockRow('converting', i + 1, l, labels, now)));
      rows.push(more(r.converting.length, r.converting_total, 'conversions'));
      r.waiting.forEach((l, i) => rows.push(lockRow('waiting', i + 1, l, labels, now)));
      rows.push(more(r.waiting.length, r.waiting_total, 'waiters'));
      return el('article', { className: 'resource', data: { resource: r.name } },
        el('h3', null, el('span', { className: 'name' }, r.name), el('span', { className: 'kind' }, kind),
          el('span', { className: 'counts' },
            `${r.holders_total} holding · ${r.converting_total + r.waiting_total} waiting`)),
        el('table', null, el('tbody', null, ...rows)));
    });
    $('resources').replaceChildren(...cards);
    const none = $('no-resources');
    none.hidden = cards.length > 0;
    none.textContent = s.prefix ? `No resource whose name begins with “${s.prefix}” is locked or awaited.` :
      'No resource is locked or awaited.';
    const m = $('more-resources');
    m.hidden = !s.more_resources;
    m.textContent = `Only the first ${s.limit} resources are shown; narrow the prefix to see others.`;
  }

  function renderSessions(s, now) {
    const rows = (s.sessions || []).map((x) => el('tr', { className: 'session-row', data: { session: x.id, label: x.label } },
      el('td', null, `#${x.id}`),
      el('td', { className: 'label' }, x.label),
      el('td', null, duration(ms(x.ttl))),
      el('td', { className: 'ttl-left', title: x.expires_in === undefined ? 'known to the serving leader only' : '' },
        duration(ms(x.expires_in))),
      el('td', null, String(x.held)),
      el('td', null, String(x.waiting)),
      el('td', null, `${duration(since(now, x.opened_at))} ago`)));
    $('sessions').tBodies[0].replaceChildren(...rows);
    const note = $('sessions-note');
    note.hidden = !s.prefix;
    note.textContent = s.prefix ? 'Sessions holding or awaiting the resources shown.' : '';
    const m = $('more-sessions');
    m.hidden = !s.more_sessions;
    m.textContent = `Only the first ${s.limit} sessions are shown.`;
  }

  // --- the filter -------------------------------------------------------------

  const input = $('prefix');
  input.value = prefix;
  let debounce = 0;
  input.addEventListener('input', () => {
    clearTimeout(debounce);
    debounce = setTimeout(() => {
      if (input.value === prefix) return;
      prefix = input.value;
      const u = new URL(location.href);
      if (prefix) u.searchParams.set('prefix', prefix);
      else u.searchParams.delete('prefix');
      history.replaceState(null, '', u);
      connect();
    }, 250);
  });

  start();
})();
