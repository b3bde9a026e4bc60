/* PicoBot WebUI — the WebSocket (PROTOCOL.md §1): reconnect with backoff, ping/pong liveness,
 * close code 4401 → login, 4429 (too many failed sign-ins) → wait the seconds it names. No DOM here. */
(function (root) {
  'use strict';

  /** The WebSocket with reconnect/backoff and a ping every 25 s (a missed pong drops the socket,
   *  because a half-open TCP connection can otherwise look alive for minutes). */
  class Connection {
    constructor(url, { onFrame, onStatus, onUnauthorized }) {
      this.url = url; this.onFrame = onFrame; this.onStatus = onStatus; this.onUnauthorized = onUnauthorized;
      this.ws = null; this.attempt = 0; this.retryTimer = null; this.pingTimer = null;
      this.awaitingPong = false; this.nonce = 0;
    }

    start() { this._connect(); }

    /** Send a frame; false when not connected (the caller keeps what must survive a reconnect). */
    send(obj) {
      if (!this.ws || this.ws.readyState !== 1) return false;
      this.ws.send(JSON.stringify(obj));
      return true;
    }

    reconnectNow() {
      if (this.ws) return;
      clearTimeout(this.retryTimer);
      this._connect();
    }

    _connect() {
      this.retryTimer = null;
      this.onStatus('connecting');
      let ws;
      try { ws = new WebSocket(this.url); } catch (e) { this._retry(); return; }
      this.ws = ws;
      ws.onopen = () => { this.onStatus('open'); this._startPing(); };
      ws.onmessage = (ev) => {
        let frame;
        try { frame = JSON.parse(ev.data); } catch (e) { return; }
        if (!frame || typeof frame.type !== 'string') return;
        if (frame.type === 'pong') this.awaitingPong = false;
        if (frame.type === 'ready') this.attempt = 0;
        // Sent before a 4429 close (Daphne drops close reasons, so the frame carries the wait).
        if (frame.type === 'error' && Number.isFinite(frame.retry_after)) this.retryAfter = frame.retry_after;
        this.onFrame(frame);
      };
      ws.onclose = (ev) => this._closed(ev.code, ev.reason);
    }

    _closed(code, reason) {
      clearInterval(this.pingTimer);
      this.ws = null;
      if (code === 4401) { this.onStatus('unauthorized'); this.onUnauthorized(); return; }
      if (code === 4429) {
        const wait = this.retryAfter ? this.retryAfter * 1000 : retryAfterMs(reason);
        this.retryAfter = null;
        this._retry(wait);
        return;
      }
      this._retry();
    }

    _retry(atLeastMs = 0) {
      // 0.5 s doubling to 15 s, ±25 % jitter so a restarted server is not hit by every tab at once.
      const backoff = Math.min(15000, 500 * 2 ** this.attempt) * (0.75 + Math.random() * 0.5);
      const delay = Math.max(backoff, atLeastMs);
      this.attempt += 1;
      this.onStatus('waiting', { delay, attempt: this.attempt });
      this.retryTimer = setTimeout(() => this._connect(), delay);
    }

    _startPing() {
      this.awaitingPong = false;
      this.pingTimer = setInterval(() => {
        if (this.awaitingPong) { this._drop(); return; }
        this.awaitingPong = true;
        this.send({ type: 'ping', nonce: String(++this.nonce) });
      }, 25000);
    }

    _drop() {
      const ws = this.ws;
      if (!ws) return;
      ws.onclose = ws.onmessage = null;
      try { ws.close(); } catch (e) { /* already closing */ }
      this._closed(1006);
    }
  }

  /** The wait a 4429 close reason names ("… retry in 40 s", PROTOCOL §1), in ms; 60 s if none. */
  function retryAfterMs(reason) {
    const match = /retry in (\d+) s/.exec(reason || '');
    return (match ? Number(match[1]) : 60) * 1000;
  }

  root.PicoBot = Object.assign(root.PicoBot || {}, { Connection, retryAfterMs });
})(typeof window !== 'undefined' ? window : globalThis);
