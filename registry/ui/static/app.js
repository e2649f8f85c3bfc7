// The on-call page's script: follows /events and puts each changed job's
// fields in place as text, and a job's history afresh; filters, sorts and counts the jobs table; says
// when contact with the registry is lost. Without it the page still shows
// everything as it was when loaded.
'use strict';
(() => {
  const contact = document.getElementById('contact');
  const tbody = document.getElementById('rows');
  const record = document.getElementById('record');
  const stateFilter = document.getElementById('state-filter');
  const textFilter = document.getElementById('text-filter');
  const collator = new Intl.Collator(undefined, { numeric: true });
  const rows = new Map();
  if (tbody) for (const tr of tbody.rows) rows.set(tr.dataset.job, tr);
  let sortKey = 'job';
  let sortDir = 1;

  // The table's columns, in order: each is a field of a job's row.
  const columns = [...document.querySelectorAll('#jobs th button')].map((b) => b.dataset.sort);

  function fillRow(tr, row) {
    tr.dataset.state = row.state;
    columns.forEach((field, i) => {
      const cell = tr.cells[i];
      if (field === 'job') {
        cell.firstElementChild.href = row.url;
        cell.firstElementChild.textContent = row.job;
      } else {
        cell.textContent = row[field] ?? '';
      }
    });
  }

  // When each action's form shows (its data-when), as the server decides
  // it for the page it sends.
  const actionShows = {
    quarantined: (row) => row.state === 'QUARANTINED',
    'not-quarantined': (row) => row.state !== 'QUARANTINED',
    held: (row) => row.holder !== '',
  };

  function fillRecord(row) {
    record.dataset.state = row.state;
    for (const dd of record.querySelectorAll('[data-field]')) dd.textContent = row[dd.dataset.field] ?? '';
    for (const f of document.querySelectorAll('form[data-when]')) f.hidden = !actionShows[f.dataset.when](row);
  }

  function cellText(tr, key) {
    return tr.cells[columns.indexOf(key)].textContent;
  }

  function refresh() {
    if (!tbody) return;
    const want = stateFilter.value;
    const text = textFilter.value.toLowerCase();
    const list = [...rows.values()];
    list.sort((a, b) => sortDir * collator.compare(cellText(a, sortKey), cellText(b, sortKey)));
    const counts = {};
    let shown = 0;
    for (const tr of list) {
      counts[tr.dataset.state] = (counts[tr.dataset.state] || 0) + 1;
      tr.hidden = (want !== '' && tr.dataset.state !== want) || (text !== '' && !tr.textContent.toLowerCase().includes(text));
      if (!tr.hidden) shown++;
    }
    tbody.append(...list);
    for (const el of document.querySelectorAll('[data-count]')) el.textContent = counts[el.dataset.count] || 0;
    document.getElementById('shown').textContent = shown;
  }

  function show(row) {
    if (tbody) {
      let tr = rows.get(row.job);
      if (!tr) {
        tr = document.getElementById('row-template').content.querySelector('tr').cloneNode(true);
        tr.dataset.job = row.job;
        rows.set(row.job, tr);
      }
      fillRow(tr, row);
      refresh();
    }
    if (record && record.dataset.job === row.job) {
      fillRecord(row);
      refreshHistory();
    }
  }

  // A job's history comes again with its page, rendered and escaped by
  // the server; the parsed page's scripts never run.
  async function refreshHistory() {
    const answer = await fetch(location.pathname, { credentials: 'same-origin' });
    if (!answer.ok) return;
    const page = new DOMParser().parseFromString(await answer.text(), 'text/html');
    const fresh = page.getElementById('history');
    if (fresh) document.getElementById('history').replaceWith(document.adoptNode(fresh));
  }

  if (tbody) {
    stateFilter.addEventListener('change', refresh);
    textFilter.addEventListener('input', refresh);
    for (const b of document.querySelectorAll('button[data-sort]')) {
      b.addEventListener('click', () => {
        sortDir = sortKey === b.dataset.sort ? -sortDir : 1;
        sortKey = b.dataset.sort;
        for (const th of document.querySelectorAll('th')) th.removeAttribute('aria-sort');
        b.parentElement.setAttribute('aria-sort', sortDir > 0 ? 'ascending' : 'descending');
        refresh();
      });
    }
  }

  // Contact: a ping comes every 10 s; after 25 s of silence, or an error,
  // the page says it lost contact. Once heard again it reloads, to show
  // what changed meanwhile.
  let lastHeard = Date.now();
  let lostAt = null;
  function lost(why) {
    if (lostAt) return;
    lostAt = new Date();
    contact.textContent = 'Contact with the registry lost at ' + lostAt.toLocaleTimeString() + ': ' + why +
      '. What you see may be out of date.';
    contact.hidden = false;
    document.body.dataset.contact = 'lost';
  }
  function heard() {
    lastHeard = Date.now();
    if (lostAt) location.reload();
  }
  const events = new EventSource('/events');
  events.addEventListener('ping', heard);
  events.addEventListener('job', (e) => {
    heard();
    show(JSON.parse(e.data));
  });
  events.addEventListener('resync', () => location.reload());
  events.addEventListener('logout', () => location.assign('/login'));
  events.addEventListener('error', () => {
    lost(events.readyState === EventSource.CLOSED ? 'reload the page to log in again' : 'retrying');
  });
  setInterval(() => {
    if (Date.now() - lastHeard > 25000) lost('no answer for 25 s, retrying');
  }, 5000);
  document.body.dataset.contact = 'live';
})();
