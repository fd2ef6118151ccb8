// capture_reference's page probe: evaluated in the page after it loaded, it
// returns raw measurements that facts.go aggregates (type scale, fonts, measure,
// rhythm, breakpoints). Bounded: at most 4000 text runs, 400 paragraphs, 2000 gaps
// and 400 media queries, so a huge page cannot flood the result.
(() => {
  const MAX_RUNS = 4000, MAX_PARAS = 400, MAX_GAPS = 2000, MAX_MEDIA = 400;
  const skip = new Set(['SCRIPT', 'STYLE', 'NOSCRIPT', 'TEMPLATE', 'SVG', 'svg']);
  const body = document.body || document.documentElement;
  const px = v => { const n = parseFloat(v); return isFinite(n) ? n : 0; };

  // Text runs: every visible text node with its element's computed type.
  const runs = [];
  const walker = document.createTreeWalker(body, NodeFilter.SHOW_TEXT);
  const range = document.createRange();
  for (let n = walker.nextNode(); n && runs.length < MAX_RUNS; n = walker.nextNode()) {
    const text = n.textContent.replace(/\s+/g, ' ').trim();
    const el = n.parentElement;
    if (!text || !el || skip.has(el.tagName)) continue;
    range.selectNodeContents(n);
    const rects = range.getClientRects();
    if (!rects.length || (rects[0].width === 0 && rects[0].height === 0)) continue;
    const cs = getComputedStyle(el);
    if (cs.visibility === 'hidden' || cs.visibility === 'collapse' || px(cs.opacity) === 0) continue;
    runs.push({
      chars: text.length, size: px(cs.fontSize), family: cs.fontFamily, weight: String(cs.fontWeight),
      line_height: cs.lineHeight === 'normal' ? 0 : px(cs.lineHeight), tag: el.tagName.toLowerCase(),
    });
  }

  // Paragraphs of the main text: lines counted from the line boxes' tops.
  const root = document.querySelector('main, article, [role=main]') || body;
  const paras = [];
  for (const el of root.querySelectorAll('p, li, blockquote, dd')) {
    if (paras.length >= MAX_PARAS) break;
    const text = el.textContent.replace(/\s+/g, ' ').trim();
    if (text.length < 40) continue;
    const cs = getComputedStyle(el);
    if (cs.display === 'none' || cs.visibility === 'hidden') continue;
    range.selectNodeContents(el);
    const tops = [...range.getClientRects()].filter(r => r.width > 0 && r.height > 0).map(r => r.top).sort((a, b) => a - b);
    if (!tops.length) continue;
    const fs = px(cs.fontSize) || 16;
    let lines = 1;
    for (let i = 1, last = tops[0]; i < tops.length; i++) {
      if (tops[i] > last + fs * 0.5) { lines++; last = tops[i]; }
    }
    const box = el.getBoundingClientRect();
    const inner = box.height - px(cs.paddingTop) - px(cs.paddingBottom) - px(cs.borderTopWidth) - px(cs.borderBottomWidth);
    paras.push({
      chars: text.length, lines, width: Math.round(box.width), font_size: fs,
      line_height: cs.lineHeight === 'normal' ? Math.round(inner / lines * 10) / 10 : px(cs.lineHeight),
    });
  }

  // Block spacing: the vertical gap between a block and its next sibling block.
  const gaps = [];
  const blocks = 'p, h1, h2, h3, h4, h5, h6, ul, ol, li, blockquote, pre, figure, table, section, article, header, footer, aside, nav, dl, hr, form';
  for (const el of root.querySelectorAll(blocks)) {
    if (gaps.length >= MAX_GAPS) break;
    const next = el.nextElementSibling;
    if (!next || !next.matches(blocks)) continue;
    const a = el.getBoundingClientRect(), b = next.getBoundingClientRect();
    if (!a.height || !b.height) continue;
    const gap = Math.round(b.top - a.bottom);
    if (gap >= 0 && gap <= 400) gaps.push(gap);
  }

  // Media queries of every stylesheet this page may read (cross-origin sheets
  // without CORS cannot be read: counted, not guessed).
  const media = [];
  let unreadable = 0;
  const walk = rules => {
    for (const r of rules) {
      if (media.length >= MAX_MEDIA) return;
      if (r.media && r.media.mediaText && (r.type === CSSRule.MEDIA_RULE || r.type === CSSRule.IMPORT_RULE)) media.push(r.media.mediaText);
      if (r.type === CSSRule.IMPORT_RULE && r.styleSheet) { try { walk(r.styleSheet.cssRules); } catch (e) { unreadable++; } }
      else if (r.cssRules) walk(r.cssRules);
    }
  };
  for (const s of document.styleSheets) {
    if (s.media && s.media.mediaText) media.push(s.media.mediaText);
    try { walk(s.cssRules); } catch (e) { unreadable++; }
  }

  const fonts = [];
  if (document.fonts) for (const f of document.fonts) if (f.status === 'loaded') fonts.push(f.family.replace(/^["']|["']$/g, '') + ' ' + f.weight + ' ' + f.style);

  return {
    title: document.title, runs, paras, gaps, media, unreadable_sheets: unreadable, web_fonts: [...new Set(fonts)],
    height: Math.max(document.documentElement.scrollHeight, body.scrollHeight),
  };
})()
