(function () {
  function tick() {
    var now = Date.now();
    document.querySelectorAll('[data-expires]').forEach(function (el) {
      var left = Math.round((Date.parse(el.dataset.expires) - now) / 1000);
      if (isNaN(left)) return;
      if (left <= 0) { el.textContent = 'expired'; el.classList.add('expired'); return; }
      var h = Math.floor(left / 3600), m = Math.floor(left % 3600 / 60), s = left % 60;
      el.textContent = (h ? h + 'h ' : '') + (h || m ? m + 'm ' : '') + s + 's left';
    });
  }
  function flash(text, bad) {
    var el = document.getElementById('flash');
    el.textContent = text || ''; el.className = bad ? 'error' : '';
  }
  // The state ref's commit the shown part was rendered after (read before the render; '' if unknown).
  function commitOf(doc) {
    var meta = doc.querySelector('meta[name=gw-commit]');
    return meta ? meta.content : '';
  }
  var shown = commitOf(document);
  var busy = false, again = false;
  function refresh() {
    if (busy) { again = true; return; }
    busy = true;
    fetch(location.href, {credentials: 'same-origin'}).then(function (r) { return r.text(); }).then(function (text) {
      var doc = new DOMParser().parseFromString(text, 'text/html');
      var fresh = doc.getElementById('live');
      var live = document.getElementById('live');
      if (fresh && live) { live.replaceWith(fresh); shown = commitOf(doc); tick(); }
    }).finally(function () { busy = false; if (again) { again = false; refresh(); } });
  }
  // Every message of the stream names the ref's commit: the first (hello) too, so a move between the
  // render and the stream's opening (or while a dropped stream reconnected) is shown, not lost.
  function moved(event) {
    var data = {};
    try { data = JSON.parse(event.data) || {}; } catch (e) { /* a message without a body: look again */ }
    if ((data.commit || '') !== shown) refresh();
  }
  function value(input) {
    if (input.hasAttribute('data-int')) return parseInt(input.value, 10);
    if (input.hasAttribute('data-bool')) return input.value === 'true';
    return input.value;
  }
  document.addEventListener('submit', function (event) {
    var form = event.target;
    if (!form.dataset || !form.dataset.op) return;
    event.preventDefault();
    var doc = {op: form.dataset.op};
    form.querySelectorAll('input,textarea,select').forEach(function (input) {
      if (!input.name || ((input.type === 'radio' || input.type === 'checkbox') && !input.checked)) return;
      doc[input.name] = value(input);
    });
    var csrf = document.querySelector('meta[name=gw-csrf]');
    fetch('/v1/commands', {method: 'POST', credentials: 'same-origin',
                           headers: {'Content-Type': 'application/json', 'X-CSRF-Token': csrf ? csrf.content : ''},
                           body: JSON.stringify(doc)})
      .then(function (r) { return r.json().then(function (body) { return [r.status, body]; }); })
      .then(function (answer) {
        var body = answer[1];
        if (body.ok) {
          flash(doc.op + ' done');
          if (form.querySelector('textarea') || !form.closest('#live')) form.reset();
          refresh();
        } else flash(body.error + ' (' + body.code + '): ' + body.message, true);
      });
  });
  var live = document.getElementById('live');
  if (live && window.EventSource) {
    var source = new EventSource(live.dataset.live);
    source.addEventListener('state', moved);
    document.documentElement.dataset.stream = 'connecting';
    source.addEventListener('hello', function (event) { document.documentElement.dataset.stream = 'open'; moved(event); });
  }
  // Live terminals (the executions page): every terminal shown polls its capture, two seconds after the
  // last answers came, so a slow server never gets a pile of them (they share the browser's six
  // connections to it with the page's re-render). A terminal a re-render brings (an execution started
  // after the page opened) is polled too.
  function captures() {
    var asks = [];
    document.querySelectorAll('pre[data-capture]').forEach(function (el) {
      asks.push(fetch(el.dataset.capture, {credentials: 'same-origin'}).then(function (r) {
        return r.ok ? r.json() : null;
      }).then(function (body) {
        if (body && body.ok && el.textContent !== body.text) { el.textContent = body.text; el.dataset.fresh = '1'; }
      }).catch(function () {}));
    });
    Promise.all(asks).then(function () { setTimeout(captures, 2000); });
  }
  tick();
  setInterval(tick, 1000);
  if (live) setTimeout(captures, 2000);
})();
