// govinfer's chat page. It talks to the server's OpenAI endpoints only
// (GET /v1/models, POST /v1/chat/completions), keeps conversations in this
// browser (localStorage) and renders answers as Markdown through marked,
// sanitized by DOMPurify, with highlight.js for code and KaTeX for math.
// When /v1/models lists "image" in the model's input_modalities, images can
// be attached (picker, paste, drop): downscaled here with a canvas and sent
// as image_url parts holding data: URLs.
// The page's Content-Security-Policy allows no inline script or style, so
// everything here builds the DOM through its API.
'use strict';

(() => {
  const STORE = 'govinfer.conversations';
  const KEY = 'govinfer.apiKey';
  const CURRENT = 'govinfer.current';
  const MAX_IMPORT = 20 << 20; // bytes of an imported file
  const SETTINGS = ['temperature', 'top_p', 'top_k', 'min_p', 'max_tokens', 'seed'];
  // MAX_PIXELS bounds width × height of an attached image: larger ones are
  // downscaled in the page, keeping the aspect ratio, before they are sent
  // and stored. Qwen3.5's processor takes up to 16,777,216 pixels (its
  // preprocessor_config.json longest_edge) and the server does not say its
  // bound, so the page picks 1,003,520 (1024 × 980, 980 tokens of 32 × 32
  // pixels): enough for a screenshot's text, and a JPEG small enough (some
  // 100 to 400 KB) that a few fit in localStorage's 5 MB.
  const MAX_PIXELS = 1003520;
  const JPEG_QUALITY = 0.9;
  const MAX_IMAGE_FILE = 64 << 20; // bytes of a file to attach, before downscaling
  const DATA_IMAGE = /^data:image\/(?:png|jpeg|gif|webp);base64,[A-Za-z0-9+/]+=*$/;

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
    pending: [], // data: URLs of the images attached to the next message
    preparing: Promise.resolve(), // the images being downscaled, one after the other, in order
    preparingCount: 0,
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
      const images = state.convs.some((c) => c.messages.some((m) => m.images && m.images.length));
      notice('Could not save the conversations in this browser: ' + e.message +
        (images ? ' (images take room: export and delete old conversations)' : ''));
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
        typeof m.content === 'string' && (m.images === undefined || validImages(m.images)));
  }

  // validImages: a list of base64 data: URLs of the image types the server
  // takes (what the page stores; an import may hold anything).
  function validImages(v) {
    return Array.isArray(v) && v.every((u) => typeof u === 'string' && DATA_IMAGE.test(u));
  }

  // takesImages: whether the model lists "image" in its input_modalities.
  function takesImages() {
    const mods = state.model && state.model.input_modalities;
    return Array.isArray(mods) && mods.includes('image');
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
      info.textContent = `${m.id} · context ${m.max_model_len} tokens` + (takesImages() ? ' · images' : '');
      offerImages();
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
    if (st.finish) parts.push(finishText(st.finish));
    return parts.join(' · ');
  }

  // FINISH says in words why an answer ended: the API's finish_reason, or
  // "stopped" for the stop button.
  const FINISH = {
    stop: 'finished',
    length: 'stopped: reached the token limit (max_tokens or the context)',
    tool_calls: 'stopped: the model called a tool',
    abort: 'stopped: the server aborted the answer',
    error: 'stopped: the model failed',
    stopped: 'stopped by you',
  };

  function finishText(reason) {
    return Object.hasOwn(FINISH, reason) ? FINISH[reason] : 'stopped: ' + reason;
  }

  function messageView(c, m, i) {
    const v = el('div', 'msg ' + m.role);
    v.dataset.index = i;
    v.appendChild(el('div', 'role', m.role === 'user' ? 'You' : (state.model ? state.model.id : 'Assistant')));
    const bubble = el('div', 'bubble');
    v.appendChild(bubble);
    if (m.role === 'user') {
      if (m.images && m.images.length) bubble.appendChild(imagesView(m.images));
      bubble.appendChild(el('span', 'text', m.content));
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

  // imagesView shows a message's images (data: URLs, which the CSP's
  // img-src allows); a click opens one full size in a new tab.
  function imagesView(urls) {
    const box = el('div', 'images');
    for (const u of urls) {
      const img = el('img');
      img.src = u;
      img.alt = 'attached image';
      img.addEventListener('click', () => openImage(u));
      box.appendChild(img);
    }
    return box;
  }

  // openImage shows an image full size in a new tab, through a blob: URL
  // (browsers refuse to navigate to data: URLs, and the CSP's connect-src
  // refuses fetching one, so the page decodes it).
  function openImage(u) {
    const comma = u.indexOf(',');
    const bin = atob(u.slice(comma + 1));
    const bytes = new Uint8Array(bin.length);
    for (let i = 0; i < bin.length; i++) bytes[i] = bin.charCodeAt(i);
    const url = URL.createObjectURL(new Blob([bytes], { type: u.slice(5, u.indexOf(';')) }));
    window.open(url, '_blank', 'noopener');
    setTimeout(() => URL.revokeObjectURL(url), 60000);
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
    const images = c.messages[i].images;
    send.addEventListener('click', () => {
      if (!ta.value.trim() && !(images && images.length)) return;
      c.messages.splice(i);
      const m = { role: 'user', content: ta.value };
      if (images && images.length) m.images = images;
      c.messages.push(m);
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
    for (const m of c.messages) {
      if (m.images && m.images.length) {
        const parts = m.images.map((u) => ({ type: 'image_url', image_url: { url: u } }));
        if (m.content) parts.push({ type: 'text', text: m.content });
        messages.push({ role: m.role, content: parts });
      } else {
        messages.push({ role: m.role, content: m.content });
      }
    }
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

  // clearFailures forgets the errors of earlier attempts in c, which a new
  // one makes stale: an answer that failed with nothing leaves the
  // conversation (it would go to the model as an empty turn), the others
  // keep their text without the error.
  function clearFailures(c) {
    for (let i = c.messages.length - 1; i >= 0; i--) {
      const m = c.messages[i];
      if (m.role === 'assistant' && m.error && !m.content) c.messages.splice(i, 1);
      else delete m.error;
    }
  }

  async function generate(c) {
    if (state.busy) return;
    clearFailures(c);
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

  function send(text, images) {
    const c = state.current;
    const hasImages = images && images.length > 0;
    if (state.busy || (!text.trim() && !hasImages)) return;
    if (!c.messages.length && c.title === 'New chat') c.title = text.trim().replace(/\s+/g, ' ').slice(0, 60) || 'Image';
    const m = { role: 'user', content: text };
    if (hasImages) m.images = images;
    c.messages.push(m);
    if (!state.convs.includes(c)) state.convs.unshift(c);
    showList();
    generate(c);
  }

  // ---- images ----

  // fitSize returns the size, within MAX_PIXELS, of an image of w × h
  // pixels: its own, or downscaled keeping the aspect ratio.
  function fitSize(w, h) {
    if (w * h <= MAX_PIXELS) return [w, h];
    const f = Math.sqrt(MAX_PIXELS / (w * h));
    let nw = Math.max(1, Math.floor(w * f));
    let nh = Math.max(1, Math.floor(h * f));
    while (nw * nh > MAX_PIXELS) { if (nw >= nh) nw--; else nh--; }
    return [nw, nh];
  }

  // decodeImage decodes an image file (EXIF orientation applied) into
  // something a canvas draws.
  async function decodeImage(file) {
    if (window.createImageBitmap) {
      try {
        return await createImageBitmap(file, { imageOrientation: 'from-image' });
      } catch (e) { /* the <img> path below, then its error */ }
    }
    const url = URL.createObjectURL(file); // blob:, which the CSP's img-src allows
    try {
      const img = new Image();
      img.src = url;
      await img.decode();
      return img;
    } finally {
      URL.revokeObjectURL(url);
    }
  }

  // prepareImage returns a file's image as the data: URL the page sends and
  // stores: at most MAX_PIXELS, re-encoded by a canvas as JPEG, or as PNG
  // when it has transparent pixels.
  async function prepareImage(file) {
    const src = await decodeImage(file);
    const w = src.width || src.naturalWidth;
    const h = src.height || src.naturalHeight;
    if (!w || !h) throw new Error('the image is empty');
    const [nw, nh] = fitSize(w, h);
    const canvas = el('canvas');
    canvas.width = nw;
    canvas.height = nh;
    const g = canvas.getContext('2d', { willReadFrequently: true });
    g.imageSmoothingEnabled = true;
    g.imageSmoothingQuality = 'high';
    g.drawImage(src, 0, 0, nw, nh);
    if (src.close) src.close();
    const px = g.getImageData(0, 0, nw, nh).data;
    let alpha = false;
    for (let i = 3; i < px.length; i += 4) {
      if (px[i] !== 255) { alpha = true; break; }
    }
    const url = alpha ? canvas.toDataURL('image/png') : canvas.toDataURL('image/jpeg', JPEG_QUALITY);
    if (!DATA_IMAGE.test(url)) throw new Error('the browser could not encode it');
    return url;
  }

  // attachFiles downscales the image files of a picker, paste or drop and
  // adds them to the next message.
  function attachFiles(files) {
    const list = [...files];
    if (!list.length) return;
    if (!takesImages()) {
      notice('This model takes no images (its /v1/models entry lists no "image" input).');
      return;
    }
    for (const f of list) {
      if (!/^image\//.test(f.type)) {
        notice(`${f.name || 'The file'} is not an image.`);
        continue;
      }
      if (f.size > MAX_IMAGE_FILE) {
        notice(`${f.name || 'The image'} is too large (${f.size} bytes; at most ${MAX_IMAGE_FILE}).`);
        continue;
      }
      state.preparingCount++;
      state.preparing = state.preparing.then(() => prepareImage(f)).then((url) => {
        state.pending.push(url);
        showPending();
      }, (e) => {
        notice(`Could not read ${f.name || 'the image'}: ${e.message || e}`);
      }).finally(() => { state.preparingCount--; });
    }
  }

  // showPending shows the images attached to the next message, each with a
  // button that removes it.
  function showPending() {
    const box = $('attachments');
    box.replaceChildren();
    state.pending.forEach((u, i) => {
      const t = el('div', 'thumb');
      const img = el('img');
      img.src = u;
      img.alt = `image ${i + 1}`;
      const rm = el('button', 'remove', '✕');
      rm.type = 'button';
      rm.title = 'Remove';
      rm.setAttribute('aria-label', `Remove image ${i + 1}`);
      rm.addEventListener('click', () => {
        state.pending.splice(i, 1);
        showPending();
      });
      t.append(img, rm);
      box.appendChild(t);
    });
    box.hidden = !state.pending.length;
  }

  // offerImages shows the attach button when the model takes images, and
  // drops pending ones when it does not.
  function offerImages() {
    const on = takesImages();
    $('attach-btn').hidden = !on;
    $('attach-file').disabled = !on;
    if (!on && state.pending.length) {
      state.pending = [];
      showPending();
    }
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
        messages: c.messages.filter((m) => m && (m.role === 'user' || m.role === 'assistant') && typeof m.content === 'string' &&
          (m.images === undefined || validImages(m.images)))
          .map((m) => ({
            role: m.role, content: m.content, reasoning: typeof m.reasoning === 'string' ? m.reasoning : undefined,
            images: m.role === 'user' && validImages(m.images) && m.images.length ? m.images : undefined,
          })),
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
    $('composer').addEventListener('submit', async (e) => {
      e.preventDefault();
      if (state.busy) return;
      if (state.preparingCount) await state.preparing; // images still downscaling
      if (state.busy) return;
      const text = input.value;
      if (!text.trim() && !state.pending.length) return;
      const images = state.pending;
      state.pending = [];
      showPending();
      input.value = '';
      resize();
      send(text, images);
    });
    $('attach-btn').addEventListener('click', () => $('attach-file').click());
    $('attach-file').addEventListener('change', (e) => {
      const files = [...e.target.files];
      e.target.value = '';
      attachFiles(files);
    });
    input.addEventListener('paste', (e) => {
      const files = [...((e.clipboardData && e.clipboardData.files) || [])].filter((f) => /^image\//.test(f.type));
      if (!files.length) return;
      if (!e.clipboardData.types.includes('text/plain')) e.preventDefault();
      attachFiles(files); // refused with a notice when the model takes no images
    });
    // A file dropped anywhere is attached (or refused with a notice), never
    // opened by the browser in place of the page.
    const hasFiles = (e) => e.dataTransfer && [...e.dataTransfer.types].includes('Files');
    document.addEventListener('dragover', (e) => {
      if (!hasFiles(e)) return;
      e.preventDefault();
      e.dataTransfer.dropEffect = 'copy'; // refused with a notice on drop when the model takes no images
      $('main').classList.toggle('dropping', takesImages());
    });
    document.addEventListener('dragleave', (e) => {
      if (!e.relatedTarget) $('main').classList.remove('dropping');
    });
    document.addEventListener('drop', (e) => {
      $('main').classList.remove('dropping');
      if (!hasFiles(e)) return;
      e.preventDefault();
      attachFiles(e.dataTransfer.files);
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
  window.govinfer = { state, render, importText, attachFiles, MAX_PIXELS };
  start();
})();
