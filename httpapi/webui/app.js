// govinfer's chat page. It talks to the server's OpenAI endpoints only
// (GET /v1/models, POST /v1/chat/completions), keeps conversations in this
// browser (localStorage) and renders answers as Markdown through marked,
// sanitized by DOMPurify, with highlight.js for code and KaTeX for math.
// The page's Content-Security-Policy allows no inline script or style, so
// everything here builds the DOM through its API.
'use strict';

(() => {
  const STORE = 'govinfer.conversations';
  const KEY = 'govinfer.apiKey';
  const CURRENT = 'govinfer.current';
  const MAX_IMPORT = 20 << 20; // bytes of an imported file
  const SETTINGS = ['temperature', 'top_p', 'top_k', 'min_p', 'max_tokens', 'seed'];

  const $ = (id) => document.getElementById(id);
  const el = (tag, cls, text) => {
    const e = document.createElement(tag);
    if (cls) e.className = cls;
    if (text !== undefined) e.textContent = text;
    return e;
  };

  const state = {
    convs: [], // newest first
    current: null,
    model: null, // {id, max_model_len, input_modalities}
    busy: null, // {conv, controller} while an answer streams
  };

  // ---- storage ----

  function load() {
    try {
      const v = JSON.parse(localStorage.getItem(STORE) || '[]');
      if (Array.isArray(v)) state.convs = v.filter(validConv);
    } catch (e) {
      notice('The saved conversations could not be read: ' + e.message);
    }
  }

  function save() {
    try {
      localStorage.setItem(STORE, JSON.stringify(state.convs));
      if (state.current) localStorage.setItem(CURRENT, state.current.id);
    } catch (e) {
      notice('Could not save the conversations in this browser: ' + e.message);
    }
  }

  function newID() {
    return Date.now().toString(36) + Math.random().toString(36).slice(2, 8);
  }

  function newConv() {
    return {
      id: newID(), title: 'New chat', created: Date.now(), updated: Date.now(),
      settings: { system: '', thinking: true }, messages: [],
    };
  }

  function validConv(c) {
    return c && typeof c === 'object' && typeof c.id === 'string' && Array.isArray(c.messages) &&
      c.messages.every((m) => m && typeof m === 'object' && (m.role === 'user' || m.role === 'assistant') &&
        typeof m.content === 'string');
  }

  // ---- notices ----

  let noticeTimer = 0;
  function notice(text, keep) {
    const n = $('notice');
    n.textContent = text;
    n.hidden = false;
    clearTimeout(noticeTimer);
    if (!keep) noticeTimer = setTimeout(() => { n.hidden = true; }, 8000);
  }

  // ---- API ----

  function headers() {
    const h = { 'Content-Type': 'application/json' };
    const k = localStorage.getItem(KEY);
    if (k) h.Authorization = 'Bearer ' + k;
    return h;
  }

  async function errorText(resp) {
    let msg = '';
    try {
      const body = await resp.json();
      msg = (body && body.error && (body.error.message || body.error)) || JSON.stringify(body);
    } catch (e) {
      msg = resp.statusText;
    }
    let text = `HTTP ${resp.status}: ${msg}`;
    if (resp.status === 503 || resp.status === 429) {
      const after = resp.headers.get('Retry-After');
      text += after ? ` (the server asks to retry after ${after} s)` : ' (retry later)';
    }
    return text;
  }

  async function loadModel() {
    const info = $('model-info');
    try {
      const resp = await fetch('/v1/models', { headers: headers() });
      if (resp.status === 401) {
        info.textContent = 'API key needed';
        askKey();
        return;
      }
      if (!resp.ok) {
        info.textContent = await errorText(resp);
        if (resp.status === 503) setTimeout(loadModel, 2000);
        return;
      }
      const body = await resp.json();
      const m = body.data && body.data[0];
      if (!m) {
        info.textContent = 'no model';
        return;
      }
      state.model = m;
      info.textContent = `${m.id} · context ${m.max_model_len} tokens`;
      document.title = `${m.id} · govinfer`;
    } catch (e) {
      info.textContent = 'server unreachable: ' + e.message;
      setTimeout(loadModel, 3000);
    }
  }

  function askKey() {
    const d = $('key-dialog');
    $('key-input').value = localStorage.getItem(KEY) || '';
    if (!d.open) d.showModal();
  }

  // ---- Markdown ----

  const escapeHTML = (s) => s.replace(/[&<>"']/g, (c) => ({ '&': '&amp;', '<': '&lt;', '>': '&gt;', '"': '&quot;', "'": '&#39;' }[c]));

  function setupMarked() {
    const mathBlock = {
      name: 'mathBlock', level: 'block',
      start(src) { const m = src.match(/\$\$|\\\[/); return m ? m.index : undefined; },
      tokenizer(src) {
        const m = /^\$\$([\s\S]+?)\$\$/.exec(src) || /^\\\[([\s\S]+?)\\\]/.exec(src);
        if (m) return { type: 'mathBlock', raw: m[0], text: m[1].trim() };
      },
      renderer(t) { return `<div class="math math-display" data-tex="${escapeHTML(t.text)}"></div>`; },
    };
    const mathInline = {
      name: 'mathInline', level: 'inline',
      start(src) { const m = src.match(/\$|\\\(/); return m ? m.index : undefined; },
      tokenizer(src) {
        let m = /^\$\$([\s\S]+?)\$\$/.exec(src) || /^\\\[([\s\S]+?)\\\]/.exec(src);
        if (m) return { type: 'mathInline', raw: m[0], text: m[1].trim(), display: true };
        m = /^\$(?!\s)((?:\\.|[^\\$\n])+?)(?<!\s)\$(?!\d)/.exec(src) || /^\\\(([\s\S]+?)\\\)/.exec(src);
        if (m) return { type: 'mathInline', raw: m[0], text: m[1], display: false };
      },
      renderer(t) {
        const cls = t.display ? 'math math-display' : 'math';
        return `<span class="${cls}" data-tex="${escapeHTML(t.text)}"></span>`;
      },
    };
    window.marked.use({ gfm: true, breaks: false, extensions: [mathBlock, mathInline] });
  }

  const PURIFY = {
    USE_PROFILES: { html: true }, // no SVG, no MathML: model output is text and HTML
    FORBID_TAGS: ['style', 'form', 'input', 'button', 'textarea', 'select', 'iframe', 'object', 'embed'],
    FORBID_ATTR: ['style', 'srcset', 'action', 'formaction'],
    ALLOW_DATA_ATTR: true,
  };

  // render fills box with the sanitized rendering of Markdown text.
  function render(box, text) {
    let html;
    try {
      html = window.marked.parse(text);
    } catch (e) {
      html = '<pre></pre>';
    }
    const frag = window.DOMPurify.sanitize(html, Object.assign({ RETURN_DOM_FRAGMENT: true }, PURIFY));
    for (const a of frag.querySelectorAll('a[href]')) {
      a.target = '_blank';
      a.rel = 'noopener noreferrer';
    }
    for (const img of frag.querySelectorAll('img')) {
      // Only images of the server itself load (CSP); others would only fail.
      img.loading = 'lazy';
      img.referrerPolicy = 'no-referrer';
    }
    for (const m of frag.querySelectorAll('.math[data-tex]')) {
      const tex = m.getAttribute('data-tex');
      try {
        // Into the DOM (styles through the CSSOM), not as an HTML string,
        // which the CSP's style-src would strip.
        window.katex.render(tex, m, { displayMode: m.classList.contains('math-display'), throwOnError: false, trust: false });
      } catch (e) {
        m.textContent = tex;
      }
    }
    for (const code of frag.querySelectorAll('pre > code')) {
      const lang = (/(?:^|\s)language-([\w+#.-]+)/.exec(code.className) || [])[1];
      const src = code.textContent;
      try {
        const r = lang && window.hljs.getLanguage(lang)
          ? window.hljs.highlight(src, { language: lang, ignoreIllegals: true })
          : window.hljs.highlightAuto(src);
        code.replaceChildren(window.DOMPurify.sanitize(r.value, Object.assign({ RETURN_DOM_FRAGMENT: true }, PURIFY)));
        code.classList.add('hljs');
      } catch (e) { /* left plain */ }
      const copy = el('button', 'copy', 'Copy');
      copy.type = 'button';
      copy.addEventListener('click', () => copyText(src, copy));
      code.parentNode.appendChild(copy);
    }
    box.replaceChildren(frag);
  }

  async function copyText(text, button) {
    try {
      await navigator.clipboard.writeText(text);
    } catch (e) {
      const t = el('textarea');
      t.value = text;
      document.body.appendChild(t);
      t.select();
      document.execCommand('copy');
      t.remove();
    }
    button.textContent = 'Copied';
    setTimeout(() => { button.textContent = 'Copy'; }, 1500);
  }

  // ---- views ----

  function showList() {
    const list = $('conv-list');
    list.replaceChildren();
    for (const c of state.convs) {
      const li = el('li', c === state.current ? 'current' : '', c.title || 'Untitled');
      li.title = c.title;
      li.dataset.id = c.id;
      li.addEventListener('click', () => { select(c); closeSide(); });
      list.appendChild(li);
    }
  }

  function select(c) {
    state.current = c;
    localStorage.setItem(CURRENT, c.id);
    showList();
    showConv();
  }

  function showConv() {
    const c = state.current;
    $('conv-title').textContent = c.title;
    const s = c.settings;
    $('set-system').value = s.system || '';
    $('set-thinking').checked = s.thinking !== false;
    for (const k of SETTINGS) $('set-' + k).value = s[k] === undefined || s[k] === null ? '' : s[k];
    const box = $('messages');
    box.replaceChildren();
    if (!c.messages.length) box.appendChild(el('div', 'empty', 'Ask anything.'));
    c.messages.forEach((m, i) => box.appendChild(messageView(c, m, i)));
    box.scrollTop = box.scrollHeight;
    setBusy(state.busy && state.busy.conv === c);
  }

  function statsText(st) {
    const parts = [];
    if (st.promptTokens !== undefined) {
      let p = `${st.promptTokens} prompt tokens`;
      if (st.cachedTokens) p += ` (${st.cachedTokens} cached)`;
      if (st.promptTps) p += ` · ${st.promptTps.toFixed(1)} tok/s`;
      parts.push(p);
    }
    if (st.completionTokens !== undefined) {
      let p = `${st.completionTokens} answer tokens`;
      if (st.genTps) p += ` · ${st.genTps.toFixed(1)} tok/s`;
      parts.push(p);
    }
    if (st.ttftMs !== undefined) parts.push(`first token ${Math.round(st.ttftMs)} ms`);
    if (st.finish) parts.push(st.finish);
    return parts.join(' · ');
  }

  function messageView(c, m, i) {
    const v = el('div', 'msg ' + m.role);
    v.dataset.index = i;
    v.appendChild(el('div', 'role', m.role === 'user' ? 'You' : (state.model ? state.model.id : 'Assistant')));
    const bubble = el('div', 'bubble');
    v.appendChild(bubble);
    if (m.role === 'user') {
      bubble.textContent = m.content;
    } else {
      const det = el('details', 'reasoning');
      det.appendChild(el('summary', '', 'Thinking'));
      const rt = el('div', 'reasoning-text');
      det.appendChild(rt);
      bubble.appendChild(det);
      const content = el('div', 'content');
      bubble.appendChild(content);
      fillAssistant(v, m);
    }
    const actions = el('div', 'actions');
    if (m.role === 'user') {
      const edit = el('button', '', 'Edit');
      edit.type = 'button';
      edit.className = 'edit-btn';
      edit.addEventListener('click', () => editMessage(c, i, v));
      actions.appendChild(edit);
    } else {
      const regen = el('button', 'regen-btn', 'Regenerate');
      regen.type = 'button';
      regen.addEventListener('click', () => {
        if (state.busy) return;
        c.messages.splice(i);
        generate(c);
      });
      const copy = el('button', '', 'Copy');
      copy.type = 'button';
      copy.addEventListener('click', () => copyText(m.content, copy));
      actions.append(regen, copy);
    }
    v.appendChild(actions);
    return v;
  }

  // fillAssistant shows an assistant message's reasoning, answer, stats and error.
  function fillAssistant(v, m, streaming) {
    const det = v.querySelector('details.reasoning');
    const rt = v.querySelector('.reasoning-text');
    det.hidden = !m.reasoning;
    rt.textContent = m.reasoning || '';
    det.querySelector('summary').textContent = streaming && !m.content ? 'Thinking…' : 'Thinking';
    if (streaming && !m.content && !det.dataset.touched) det.open = true;
    if (m.content && !det.dataset.touched) det.open = false;
    const content = v.querySelector('.content');
    render(content, m.content);
    content.classList.toggle('cursor', !!streaming);
    let stats = v.querySelector('.stats');
    if (m.stats) {
      if (!stats) {
        stats = el('div', 'stats');
        v.querySelector('.bubble').appendChild(stats);
      }
      stats.textContent = statsText(m.stats);
    }
    let err = v.querySelector('.error');
    if (m.error) {
      if (!err) {
        err = el('div', 'error');
        v.querySelector('.bubble').appendChild(err);
      }
      err.textContent = m.error;
    } else if (err) {
      err.remove();
    }
  }

  function editMessage(c, i, v) {
    if (state.busy) return;
    const bubble = v.querySelector('.bubble');
    const ta = el('textarea', 'edit');
    ta.value = c.messages[i].content;
    bubble.replaceChildren(ta);
    const actions = v.querySelector('.actions');
    const send = el('button', 'primary', 'Save & send');
    send.type = 'button';
    const cancel = el('button', '', 'Cancel');
    cancel.type = 'button';
    actions.replaceChildren(send, cancel);
    cancel.addEventListener('click', showConv);
    send.addEventListener('click', () => {
      if (!ta.value.trim()) return;
      c.messages.splice(i);
      c.messages.push({ role: 'user', content: ta.value });
      generate(c);
    });
    ta.focus();
  }

  function setBusy(on) {
    $('send').hidden = !!on;
    $('stop').hidden = !on;
    for (const b of document.querySelectorAll('.regen-btn, .edit-btn')) b.disabled = !!state.busy;
  }

  // ---- generation ----

  function requestBody(c) {
    const s = c.settings;
    const messages = [];
    if (s.system && s.system.trim()) messages.push({ role: 'system', content: s.system });
    for (const m of c.messages) messages.push({ role: m.role, content: m.content });
    const body = {
      model: state.model ? state.model.id : undefined,
      messages,
      stream: true,
      stream_options: { include_usage: true },
      chat_template_kwargs: { enable_thinking: s.thinking !== false },
    };
    for (const k of SETTINGS) {
      if (s[k] !== undefined && s[k] !== null && s[k] !== '') body[k] = Number(s[k]);
    }
    return body;
  }

  async function generate(c) {
    if (state.busy) return;
    const m = { role: 'assistant', content: '', reasoning: '' };
    c.messages.push(m);
    c.updated = Date.now();
    save();
    const controller = new AbortController();
    state.busy = { conv: c, controller };
    if (state.current === c) showConv();
    const view = () => (state.current === c ? document.querySelector(`#messages .msg[data-index="${c.messages.indexOf(m)}"]`) : null);
    let pending = false;
    const paint = (streaming) => {
      const v = view();
      if (!v) return;
      fillAssistant(v, m, streaming);
      const box = $('messages');
      if (box.scrollHeight - box.scrollTop - box.clientHeight < 120) box.scrollTop = box.scrollHeight;
    };
    const schedule = () => {
      if (pending) return;
      pending = true;
      requestAnimationFrame(() => { pending = false; if (state.busy && state.busy.conv === c) paint(true); });
    };
    const t0 = performance.now();
    let tFirst = 0;
    let usage = null;
    let finish = '';
    try {
      const resp = await fetch('/v1/chat/completions', {
        method: 'POST', headers: headers(), body: JSON.stringify(requestBody(c)), signal: controller.signal,
      });
      if (!resp.ok) {
        m.error = await errorText(resp);
        if (resp.status === 401) askKey();
      } else {
        const reader = resp.body.getReader();
        const dec = new TextDecoder();
        let buf = '';
        for (;;) {
          const { done, value } = await reader.read();
          if (done) break;
          buf += dec.decode(value, { stream: true });
          let cut;
          while ((cut = buf.indexOf('\n\n')) >= 0) {
            const event = buf.slice(0, cut);
            buf = buf.slice(cut + 2);
            for (const line of event.split('\n')) {
              if (!line.startsWith('data:')) continue;
              const data = line.slice(5).trim();
              if (data === '[DONE]') continue;
              let chunk;
              try { chunk = JSON.parse(data); } catch (e) { continue; }
              if (chunk.error) {
                m.error = 'Error: ' + (chunk.error.message || JSON.stringify(chunk.error));
                continue;
              }
              if (chunk.usage) usage = chunk.usage;
              const ch = chunk.choices && chunk.choices[0];
              if (!ch) continue;
              const d = ch.delta || {};
              const r = d.reasoning_content ?? d.reasoning;
              if ((d.content || r) && !tFirst) tFirst = performance.now();
              if (r) m.reasoning += r;
              if (d.content) m.content += d.content;
              if (ch.finish_reason) finish = ch.finish_reason;
              schedule();
            }
          }
        }
      }
    } catch (e) {
      if (e.name === 'AbortError') finish = 'stopped';
      else m.error = 'The request failed: ' + e.message;
    }
    const tEnd = performance.now();
    const st = {};
    if (tFirst) st.ttftMs = tFirst - t0;
    if (usage) {
      st.promptTokens = usage.prompt_tokens;
      st.completionTokens = usage.completion_tokens;
      st.cachedTokens = (usage.prompt_tokens_details && usage.prompt_tokens_details.cached_tokens) || 0;
      const fresh = st.promptTokens - st.cachedTokens;
      if (tFirst && fresh > 0) st.promptTps = fresh / ((tFirst - t0) / 1000);
      if (tFirst && st.completionTokens > 1 && tEnd > tFirst) st.genTps = (st.completionTokens - 1) / ((tEnd - tFirst) / 1000);
    }
    if (finish) st.finish = finish;
    if (Object.keys(st).length) m.stats = st;
    if (!m.reasoning) delete m.reasoning;
    state.busy = null;
    c.updated = Date.now();
    save();
    if (state.current === c) {
      paint(false);
      setBusy(false);
    }
  }

  function send(text) {
    const c = state.current;
    if (state.busy || !text.trim()) return;
    if (!c.messages.length && c.title === 'New chat') c.title = text.trim().replace(/\s+/g, ' ').slice(0, 60);
    c.messages.push({ role: 'user', content: text });
    if (!state.convs.includes(c)) state.convs.unshift(c);
    showList();
    generate(c);
  }

  // ---- conversations ----

  function exportConv() {
    const c = state.current;
    const blob = new Blob([JSON.stringify(Object.assign({ format: 'govinfer-conversation', version: 1 }, c), null, 2)], { type: 'application/json' });
    const a = el('a');
    a.href = URL.createObjectURL(blob);
    a.download = (c.title || 'conversation').replace(/[^\w.-]+/g, '_').slice(0, 60) + '.json';
    document.body.appendChild(a);
    a.click();
    a.remove();
    setTimeout(() => URL.revokeObjectURL(a.href), 1000);
  }

  // importText adds the conversations a JSON export holds (one, or a list)
  // and reports how many; anything else is refused with a notice.
  function importText(text, name) {
    let v;
    try {
      v = JSON.parse(text);
    } catch (e) {
      notice(`${name} is not JSON: ${e.message}`);
      return 0;
    }
    const list = Array.isArray(v) ? v : [v];
    const ok = [];
    for (const c of list) {
      if (!c || typeof c !== 'object' || !Array.isArray(c.messages)) continue;
      const conv = {
        id: newID(), title: typeof c.title === 'string' ? c.title.slice(0, 200) : 'Imported chat',
        created: Number(c.created) || Date.now(), updated: Date.now(),
        settings: Object.assign({ system: '', thinking: true }, c.settings && typeof c.settings === 'object' ? c.settings : {}),
        messages: c.messages.filter((m) => m && (m.role === 'user' || m.role === 'assistant') && typeof m.content === 'string')
          .map((m) => ({ role: m.role, content: m.content, reasoning: typeof m.reasoning === 'string' ? m.reasoning : undefined })),
      };
      if (conv.messages.length !== c.messages.length || !validConv(conv)) continue;
      ok.push(conv);
    }
    if (!ok.length) {
      notice(`${name} holds no conversation (expected a file exported from this page).`);
      return 0;
    }
    state.convs.unshift(...ok);
    save();
    select(ok[0]);
    notice(`Imported ${ok.length} conversation${ok.length > 1 ? 's' : ''}.`);
    return ok.length;
  }

  function importFile(file) {
    if (file.size > MAX_IMPORT) {
      notice(`${file.name} is too large (${file.size} bytes; at most ${MAX_IMPORT}).`);
      return;
    }
    file.text().then((t) => importText(t, file.name), (e) => notice('Could not read the file: ' + e.message));
  }

  function deleteConv() {
    const c = state.current;
    if (!confirm(`Delete "${c.title}"?`)) return;
    if (state.busy && state.busy.conv === c) state.busy.controller.abort();
    state.convs = state.convs.filter((x) => x !== c);
    save();
    select(state.convs[0] || newConv());
  }

  function renameConv() {
    const c = state.current;
    const t = prompt('Rename the conversation', c.title);
    if (t === null || !t.trim()) return;
    c.title = t.trim().slice(0, 200);
    save();
    showList();
    $('conv-title').textContent = c.title;
  }

  // ---- wiring ----

  function closeSide() {
    $('sidebar').classList.remove('open');
    $('backdrop').hidden = true;
  }

  function wire() {
    const input = $('input');
    const resize = () => {
      input.style.height = 'auto'; // the CSSOM, which the CSP allows
      input.style.height = Math.min(input.scrollHeight, window.innerHeight * 0.4) + 'px';
    };
    input.addEventListener('input', resize);
    input.addEventListener('keydown', (e) => {
      if (e.key === 'Enter' && !e.shiftKey && !e.isComposing) {
        e.preventDefault();
        $('composer').requestSubmit();
      }
    });
    $('composer').addEventListener('submit', (e) => {
      e.preventDefault();
      if (state.busy) return;
      const text = input.value;
      if (!text.trim()) return;
      input.value = '';
      resize();
      send(text);
    });
    $('stop').addEventListener('click', () => { if (state.busy) state.busy.controller.abort(); });
    $('new-chat').addEventListener('click', () => {
      const c = state.current;
      if (c && !c.messages.length) { closeSide(); return; }
      select(newConv());
      closeSide();
      input.focus();
    });
    $('settings-btn').addEventListener('click', () => {
      const s = $('settings');
      s.hidden = !s.hidden;
      $('settings-btn').setAttribute('aria-expanded', String(!s.hidden));
    });
    const saveSettings = () => {
      const s = state.current.settings;
      s.system = $('set-system').value;
      s.thinking = $('set-thinking').checked;
      for (const k of SETTINGS) {
        const v = $('set-' + k).value;
        if (v === '' || Number.isNaN(Number(v))) delete s[k];
        else s[k] = Number(v);
      }
      if (state.convs.includes(state.current)) save();
    };
    $('settings').addEventListener('input', saveSettings);
    $('settings').addEventListener('change', saveSettings);
    $('rename-btn').addEventListener('click', renameConv);
    $('delete-btn').addEventListener('click', deleteConv);
    $('export-btn').addEventListener('click', exportConv);
    $('import-btn').addEventListener('click', () => $('import-file').click());
    $('import-file').addEventListener('change', (e) => {
      const f = e.target.files[0];
      e.target.value = '';
      if (f) importFile(f);
    });
    $('key-btn').addEventListener('click', askKey);
    $('key-form').addEventListener('submit', (e) => {
      e.preventDefault();
      const k = $('key-input').value.trim();
      if (k) localStorage.setItem(KEY, k);
      else localStorage.removeItem(KEY);
      $('key-dialog').close();
      loadModel();
    });
    $('key-cancel').addEventListener('click', () => $('key-dialog').close());
    $('open-side').addEventListener('click', () => {
      $('sidebar').classList.add('open');
      $('backdrop').hidden = false;
    });
    $('close-side').addEventListener('click', closeSide);
    $('backdrop').addEventListener('click', closeSide);
    $('messages').addEventListener('click', (e) => {
      const d = e.target.closest && e.target.closest('details.reasoning');
      if (d && e.target.closest('summary')) d.dataset.touched = '1'; // the reader's choice stays
    });
  }

  function start() {
    setupMarked();
    load();
    wire();
    const id = localStorage.getItem(CURRENT);
    select(state.convs.find((c) => c.id === id) || state.convs[0] || newConv());
    loadModel();
    $('input').focus();
  }

  // For tests and the console: the page's state, read-only use.
  window.govinfer = { state, render, importText };
  start();
})();
