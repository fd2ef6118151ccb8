// play_test's page side. Installed before the page's own scripts (on every new
// document), it records uncaught exceptions, unhandled rejections and
// console.error; list() marks and describes the visible controls; act(n)
// plays control n once and resolves after the page had time to react.
(() => {
  if (window.__aePlay) return;
  const errors = [];
  const push = (kind, message) => { if (errors.length < 500) errors.push({ kind, message: String(message).slice(0, 1000) }); };
  window.addEventListener('error', (e) => push('exception', e.error && e.error.stack ? e.error.stack.split('\n').slice(0, 3).join(' | ') : e.message), true);
  window.addEventListener('unhandledrejection', (e) => push('rejection', e.reason && e.reason.stack ? e.reason.stack.split('\n').slice(0, 3).join(' | ') : e.reason));
  const origError = console.error;
  console.error = function (...args) { push('console.error', args.map((a) => (a instanceof Error ? a.message : typeof a === 'string' ? a : JSON.stringify(a))).join(' ')); return origError.apply(this, args); };
  // A submit must not navigate away: the page's own handlers still run.
  document.addEventListener('submit', (e) => e.preventDefault(), true);
  const visible = (el) => {
    if (el.disabled) return false;
    const r = el.getBoundingClientRect();
    const s = getComputedStyle(el);
    return r.width > 0 && r.height > 0 && s.visibility !== 'hidden' && s.display !== 'none';
  };
  const samePage = (a) => {
    const h = a.getAttribute('href') || '';
    if (h.startsWith('#') || h.toLowerCase().startsWith('javascript:')) return true;
    try { const u = new URL(h, location.href); return u.origin === location.origin && u.pathname === location.pathname && u.search === location.search; } catch (_) { return false; }
  };
  const kindOf = (el) => {
    const tag = el.tagName.toLowerCase();
    const type = (el.getAttribute('type') || '').toLowerCase();
    if (tag === 'select') return 'select';
    if (tag === 'textarea') return 'text';
    if (tag === 'input') {
      if (['checkbox', 'radio'].includes(type)) return 'check';
      if (['button', 'submit', 'reset', 'image'].includes(type)) return 'button';
      if (['', 'text', 'email', 'search', 'tel', 'url', 'number', 'password'].includes(type)) return 'text';
      return '';
    }
    if (tag === 'a') return samePage(el) ? 'link' : '';
    return 'button';
  };
  const describe = (el, kind) => {
    const tag = el.tagName.toLowerCase();
    const value = kind === 'button' ? el.value : '';
    const labelled = el.labels && el.labels.length ? el.labels[0].innerText : '';
    let label = (el.innerText || value || labelled || el.getAttribute('aria-label') || el.getAttribute('title') || el.getAttribute('name') || el.getAttribute('placeholder') || '').trim().replace(/\s+/g, ' ').slice(0, 60);
    let d = tag + (el.id ? '#' + el.id : '') + (label ? ' "' + label + '"' : '');
    return d;
  };
  window.__aePlay = {
    take() { return errors.splice(0, errors.length); },
    list(max) {
      const els = document.querySelectorAll('button, input, select, textarea, a[href], [role=button], [onclick]');
      const out = [];
      for (const el of els) {
        if (out.length >= max) break;
        const kind = kindOf(el);
        if (!kind || !visible(el)) continue;
        el.setAttribute('data-ae-play', String(out.length + 1));
        out.push({ n: out.length + 1, control: describe(el, kind), kind });
      }
      return out;
    },
    async act(n, settleMs) {
      const el = document.querySelector('[data-ae-play="' + n + '"]');
      if (!el || !el.isConnected) return { gone: true };
      const kind = kindOf(el);
      el.scrollIntoView({ block: 'center' });
      if (kind === 'select') {
        if (el.options.length > 0) el.selectedIndex = (el.selectedIndex + 1) % el.options.length;
        el.dispatchEvent(new Event('input', { bubbles: true }));
        el.dispatchEvent(new Event('change', { bubbles: true }));
      } else if (kind === 'text') {
        el.focus();
        el.value = el.type === 'number' ? '42' : el.type === 'email' ? 'play@example.com' : 'play test';
        el.dispatchEvent(new Event('input', { bubbles: true }));
        el.dispatchEvent(new Event('change', { bubbles: true }));
      } else {
        el.click();
      }
      await new Promise((r) => setTimeout(r, settleMs));
      return { gone: false, href: location.href };
    },
  };
})();
