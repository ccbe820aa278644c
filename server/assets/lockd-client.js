var __defProp = Object.defineProperty;
var __getOwnPropNames = Object.getOwnPropertyNames;
var __esm = (fn, res) => function __init() {
  return fn && (res = (0, fn[__getOwnPropNames(fn)[0]])(fn = 0)), res;
};
var __export = (target, all) => {
  for (var name in all)
    __defProp(target, name, { get: all[name], enumerable: true });
};

// client/ws.ts
var ws_exports = {};
__export(ws_exports, {
  connectWebSocket: () => connectWebSocket
});
function connectWebSocket(address, handlers, signal) {
  return new Promise((resolve, reject) => {
    const socket = address.bearer === void 0 ? new WebSocket(address.url) : new WebSocket(address.url, [
      "lockd",
      `bearer.${address.bearer}`
    ]);
    let open = false;
    let closed = false;
    let why;
    const transport = {
      send(line) {
        if (socket.readyState === WebSocket.OPEN) socket.send(line);
      },
      close() {
        if (socket.readyState === WebSocket.CONNECTING || socket.readyState === WebSocket.OPEN) {
          socket.close();
        }
        finish();
      }
    };
    const finish = () => {
      if (closed) return;
      closed = true;
      signal.removeEventListener("abort", onAbort);
      if (open) handlers.closed();
      else reject(new Error(`Cannot open WebSocket ${address.key}${why ? `: ${why}` : ""}`));
    };
    const onAbort = () => {
      socket.close();
      if (!open) {
        closed = true;
        reject(signal.reason);
      }
    };
    signal.addEventListener("abort", onAbort, {
      once: true
    });
    socket.onopen = () => {
      open = true;
      resolve(transport);
    };
    socket.onmessage = (event) => {
      if (typeof event.data === "string") handlers.line(event.data);
    };
    socket.onerror = (event) => {
      const message = event.message;
      if (typeof message === "string" && message !== "") why = message;
    };
    socket.onclose = finish;
  });
}
var init_ws = __esm({
  "client/ws.ts"() {
  }
});

// client/address.ts
var DEFAULT_PORT = 7321;
function parseAddress(text) {
  if (typeof text !== "string") {
    throw new TypeError(`Invalid lockd address: expected a string, got ${kindOf(text)}`);
  }
  const trimmed = text.trim();
  if (/^wss?:\/\//i.test(trimmed)) {
    let url;
    try {
      url = new URL(trimmed);
    } catch {
      throw new TypeError(`Invalid lockd address "${text}"`);
    }
    const scheme = url.protocol === "wss:" ? "wss" : "ws";
    const port2 = url.port ? Number(url.port) : scheme === "wss" ? 443 : 80;
    return {
      scheme,
      hostname: url.hostname,
      port: port2,
      url: url.href,
      key: url.href
    };
  }
  const tls = /^tls:\/\//i.test(trimmed);
  const rest = trimmed.replace(/^(?:tcp|tls):\/\//i, "");
  const match = /^(?:\[([0-9A-Fa-f:.]+)\]|([^\s:/\[\]]+))(?::([0-9]{1,5}))?$/.exec(rest);
  const port = match?.[3] === void 0 ? DEFAULT_PORT : Number(match[3]);
  if (!match || port < 1 || port > 65535) {
    throw new TypeError(`Invalid lockd address "${text}": expected host:port, tcp://host:port, tls://host:port, ws:// or wss:// URL`);
  }
  const hostname = match[1] ?? match[2];
  const key = hostname.includes(":") ? `[${hostname}]:${port}` : `${hostname}:${port}`;
  return {
    scheme: tls ? "tls" : "tcp",
    hostname,
    port,
    key
  };
}
function addressText(address) {
  return address.scheme === "tls" ? `tls://${address.key}` : address.key;
}
function serverList(servers) {
  if (typeof servers === "string") return [
    servers
  ];
  const iterable = typeof servers === "object" && servers !== null && Symbol.iterator in servers;
  if (!iterable) {
    throw new TypeError(`LockClient takes its server addresses first: a string or an array of strings, got ${kindOf(servers)}`);
  }
  const list = [
    ...servers
  ];
  if (list.length === 0) throw new TypeError("LockClient needs at least one server address");
  return list;
}
function kindOf(value) {
  if (value === null || value === void 0) return String(value);
  if (Array.isArray(value)) return "an array";
  return typeof value === "object" ? "an object" : `a ${typeof value}`;
}

// client/codec/fields.ts
var MAX_TOKEN = 18446744073709551615n;
var MAX_KEY_BYTES = 250;
var SECONDS = /^[0-9]+(?:\.[0-9]+)?$/;
var TOKEN = /^[1-9][0-9]{0,19}$/;
var BAD_KEY_CHAR = /[\s\p{Cc}]/u;
function utf8Length(text) {
  let bytes = text.length;
  for (let i = 0; i < text.length; i++) {
    const c = text.charCodeAt(i);
    if (c < 128) continue;
    if (c < 2048) bytes += 1;
    else if (c < 55296 || c > 57343) bytes += 2;
    else {
      bytes += 2;
      const d = text.charCodeAt(i + 1);
      if (c <= 56319 && d >= 56320 && d <= 57343) i++;
    }
  }
  return bytes;
}
function keyError(key) {
  if (key.length === 0) return "missing key";
  if (key.length > MAX_KEY_BYTES || key.length * 3 > MAX_KEY_BYTES && utf8Length(key) > MAX_KEY_BYTES) {
    return `key must be at most ${MAX_KEY_BYTES} bytes`;
  }
  if (BAD_KEY_CHAR.test(key)) return "key must not contain whitespace or control characters";
  if (!key.isWellFormed()) return "key must be valid Unicode (no lone surrogates)";
  return void 0;
}
function parseSeconds(text) {
  if (!SECONDS.test(text)) return NaN;
  const dot = text.indexOf(".");
  const whole = dot < 0 ? text : text.slice(0, dot);
  const fraction = dot < 0 ? "" : text.slice(dot + 1);
  const digits = whole.replace(/^0+/, "");
  if (digits.length > 12) return Infinity;
  let ms = Number(digits || "0") * 1e3;
  if (fraction.length > 0) {
    ms += Number((fraction + "00").slice(0, 3));
    if (/[1-9]/.test(fraction.slice(3))) ms += 1;
  }
  return ms;
}
function parseToken(text) {
  if (!TOKEN.test(text)) return void 0;
  const token = BigInt(text);
  return token <= MAX_TOKEN ? token : void 0;
}
function formatSeconds(ms) {
  if (!Number.isFinite(ms) || ms < 0) throw new RangeError(`Cannot send ${ms} ms as seconds`);
  const whole = Math.floor(ms / 1e3);
  const rest = Math.ceil(ms - whole * 1e3);
  if (whole < 2 ** 53) {
    if (rest === 0) return String(whole);
    if (rest === 1e3) return String(whole + 1);
    const fraction = rest < 10 ? `00${rest}` : rest < 100 ? `0${rest}` : String(rest);
    return `${whole}.${fraction.replace(/0+$/, "")}`;
  }
  if (rest === 0) return BigInt(whole).toString();
  if (rest === 1e3) return (BigInt(whole) + 1n).toString();
  return `${BigInt(whole)}.${String(rest).padStart(3, "0").replace(/0+$/, "")}`;
}

// client/codec/reply.ts
function parseReply(line) {
  return parseCommonReply(line) ?? parseAnyReply(line);
}
function parseCommonReply(line) {
  const op = line.charCodeAt(0);
  if (op !== 65 && op !== 82 && op !== 88 || line.charCodeAt(1) !== 32) return void 0;
  const keyEnd = line.indexOf(" ", 2);
  if (keyEnd <= 2) return void 0;
  const status = line.charCodeAt(keyEnd + 1);
  const end = keyEnd + 2;
  if (line.length === end) {
    if (op === 65) {
      return status === 84 ? {
        op: "A",
        key: line.slice(2, keyEnd),
        status: "T"
      } : void 0;
    }
    if (status === 78) {
      return {
        op: op === 82 ? "R" : "X",
        key: line.slice(2, keyEnd),
        status: "N"
      };
    }
    if (status !== op) return void 0;
    return op === 82 ? {
      op: "R",
      key: line.slice(2, keyEnd),
      status: "R"
    } : {
      op: "X",
      key: line.slice(2, keyEnd),
      status: "X"
    };
  }
  if (op !== 65 || status !== 65 || line.charCodeAt(end) !== 32) return void 0;
  const from = end + 1;
  const digits = line.length - from;
  if (digits < 1 || digits > 15 || line.charCodeAt(from) === 48) return void 0;
  let token = 0;
  for (let i = from; i < line.length; i++) {
    const c = line.charCodeAt(i) - 48;
    if (c < 0 || c > 9) return void 0;
    token = token * 10 + c;
  }
  return {
    op: "A",
    key: line.slice(2, keyEnd),
    status: "A",
    token: BigInt(token)
  };
}
function parseAnyReply(line) {
  const first = line.indexOf(" ");
  const second = first < 0 ? -1 : line.indexOf(" ", first + 1);
  if (second < 0) return void 0;
  const op = line.slice(0, first);
  const key = line.slice(first + 1, second);
  const third = line.indexOf(" ", second + 1);
  const status = line.slice(second + 1, third < 0 ? line.length : third);
  const value = third < 0 ? void 0 : line.slice(third + 1);
  if (op === "" || key === "") return void 0;
  const fits = status === "E" || status === "M" && op !== "-" || op === "HELLO" && status === "OK" || op === "A" && (status === "A" || status === "T") || op === "R" && (status === "R" || status === "N") || op === "X" && (status === "X" || status === "N") || op === "I" && (status === "I" || status === "F") || op === "S" && status === "S" || op === "L" && status === "L";
  if (!fits) return void 0;
  switch (status) {
    case "A": {
      const token = value === void 0 ? void 0 : parseToken(value);
      return token === void 0 ? void 0 : {
        op,
        key,
        status,
        token
      };
    }
    case "T":
    case "R":
    case "X":
    case "N":
    case "OK":
    case "F":
      return value === void 0 ? {
        op,
        key,
        status
      } : void 0;
    case "M":
    case "I":
    case "S":
    case "L":
      return value ? {
        op,
        key,
        status,
        text: value
      } : void 0;
    default:
      return {
        op,
        key,
        status: "E",
        text: value ?? ""
      };
  }
}
var NO_ACTIVE_NODE = "no active node";
var SHUTTING_DOWN = "shutting down";
var PROBE = "?";
function replyAction(reply) {
  if (reply.status === "M") return "redirect";
  if (reply.status === "E" && (reply.text === NO_ACTIVE_NODE || reply.text === SHUTTING_DOWN)) {
    return "retry";
  }
  return "done";
}

// client/codec/request.ts
var TOKEN_RULE = `token must be a decimal integer from 1 to ${MAX_TOKEN} without leading zeros`;
function acquireLine(key, leaseMs, waitMs, session = false) {
  const line = `A ${key} ${formatSeconds(leaseMs)} ${formatSeconds(waitMs)}`;
  return session ? `${line} s` : line;
}
function releaseLine(key, token) {
  return `R ${key} ${token}`;
}
function extendLine(key, token, leaseMs) {
  return `X ${key} ${token} ${formatSeconds(leaseMs)}`;
}

// client/codec/inspect.ts
var MAX_LOCKS_LIMIT = 1e3;
function inspectLine(key) {
  return `I ${key}`;
}
function statusLine() {
  return "S -";
}
function locksLine(prefix, limit, after2) {
  const head = `L ${prefix || "-"} ${limit}`;
  return after2 === void 0 ? head : `${head} ${after2}`;
}
function keyStateOf(reply) {
  if (reply.op !== "I") return void 0;
  if (reply.status === "F") return {
    key: reply.key,
    held: false,
    waiters: 0
  };
  if (reply.status !== "I" || reply.text === void 0) return void 0;
  const f = reply.text.split(" ");
  if (f.length !== 4) return void 0;
  const token = parseToken(f[0]);
  const leaseMs = parseSeconds(f[1]);
  if (token === void 0 || !Number.isFinite(leaseMs) || !/^(0|[1-9][0-9]*)$/.test(f[2])) {
    return void 0;
  }
  const state = {
    key: reply.key,
    held: true,
    token,
    leaseLeft: leaseMs / 1e3,
    waiters: Number(f[2])
  };
  if (f[3] !== "-") state.holder = f[3];
  return state;
}
function keyStateOfInfo(info) {
  if (typeof info !== "object" || info === null) return void 0;
  const { key, token, holder, leaseLeftSeconds, waiters } = info;
  if (typeof key !== "string" || typeof token !== "string") return void 0;
  const parsed = parseToken(token);
  if (parsed === void 0 || holder !== null && typeof holder !== "string" || typeof leaseLeftSeconds !== "number" || !(leaseLeftSeconds >= 0) || !Number.isInteger(waiters) || waiters < 0) {
    return void 0;
  }
  const state = {
    key,
    held: true,
    token: parsed,
    leaseLeft: leaseLeftSeconds,
    waiters
  };
  if (typeof holder === "string") state.holder = holder;
  return state;
}
function locksPageOf(reply) {
  if (reply.op !== "L" || reply.status !== "L" || reply.text === void 0) return void 0;
  const page = parseJson(reply.text);
  if (!Array.isArray(page?.locks) || typeof page.more !== "boolean") return void 0;
  return {
    locks: page.locks,
    more: page.more
  };
}
function nodeStatusOf(reply) {
  if (reply.op !== "S" || reply.status !== "S" || reply.text === void 0) return void 0;
  const status = parseJson(reply.text);
  if (typeof status?.address !== "string" || typeof status.role !== "string" || typeof status.version !== "string") {
    return void 0;
  }
  return status;
}
function parseJson(text) {
  try {
    return JSON.parse(text);
  } catch {
    return void 0;
  }
}

// client/codec/hello.ts
var HELLO_VERSION = 1;
var MAX_CLIENT_NAME_BYTES = 128;
var SESSION = /^[A-Za-z0-9_-]{16,64}$/;
var CREDENTIAL_NAME = /^[A-Za-z0-9._@-]{1,64}$/;
var SECRET = /^[\x21-\x7e]{1,256}$/;
function clientNameError(name) {
  if (name.length === 0) return "missing client name";
  if (utf8Length(name) > MAX_CLIENT_NAME_BYTES) {
    return `client name must be at most ${MAX_CLIENT_NAME_BYTES} bytes`;
  }
  return keyError(name)?.replace(/^key/, "client name");
}
var MAX_REFUSAL_DELAY_MS = 5e3;
function helloLine(hello) {
  const session = hello.session ?? "-";
  if (session !== "-" && !SESSION.test(session)) {
    throw new TypeError("session must be 16-64 letters, digits, '-' or '_'");
  }
  const nameProblem = clientNameError(hello.name);
  if (nameProblem !== void 0) throw new TypeError(`Invalid client name: ${nameProblem}`);
  const head = `HELLO ${HELLO_VERSION} ${session} ${hello.name}`;
  const c = hello.credential;
  if (c === void 0) return head;
  if (typeof c.name !== "string" || typeof c.secret !== "string") {
    throw new TypeError(`credential name and secret must be strings, got ${typeof c.name} and ${typeof c.secret}`);
  }
  if (!CREDENTIAL_NAME.test(c.name)) {
    throw new TypeError("credential name must be 1-64 letters, digits, '.', '_', '@' or '-'");
  }
  if (!SECRET.test(c.secret)) {
    throw new TypeError("secret must be 1-256 printable ASCII characters without spaces");
  }
  return `${head} ${c.name} ${c.secret}`;
}

// client/errors.ts
var LockError = class extends Error {
  /**
   * Creates the error.
   *
   * @param message Readable reason, sentence case, no trailing period.
   * @param options Standard error options (`cause`).
   */
  constructor(message, options) {
    super(message, options);
    this.name = "LockError";
  }
};
var LockTimeoutError = class extends LockError {
  /** The key that stayed busy. */
  key;
  /**
   * Creates the error.
   *
   * @param key The key.
   * @param waitSeconds The wait that ran out, in seconds.
   */
  constructor(key, waitSeconds) {
    super(`Lock "${key}" was not granted within ${waitSeconds} s`);
    this.name = "LockTimeoutError";
    this.key = key;
  }
};
var LockUnavailableError = class extends LockError {
  /**
   * Creates the error.
   *
   * @param message What was tried.
   * @param options Standard error options (`cause`).
   */
  constructor(message, options) {
    super(message, options);
    this.name = "LockUnavailableError";
  }
};
var LockRejectedError = class extends LockError {
  /** The server's message (the text after `E`). */
  serverMessage;
  /** The request's op (`A`, `R` or `X`). */
  op;
  /** The key. */
  key;
  /**
   * Creates the error.
   *
   * @param op The request's op.
   * @param key The key.
   * @param serverMessage The text after `E`.
   */
  constructor(op, key, serverMessage) {
    super(`lockd rejected ${op} "${key}": ${serverMessage}`);
    this.name = "LockRejectedError";
    this.serverMessage = serverMessage;
    this.op = op;
    this.key = key;
  }
};
var LockLostError = class extends LockError {
  /** The key. */
  key;
  /** The fencing token of the grant that was lost. */
  token;
  /**
   * Creates the error.
   *
   * @param key The key.
   * @param token The lost grant's token.
   * @param why What happened.
   */
  constructor(key, token, why) {
    super(`Lock "${key}" (token ${token}) is lost: ${why}`);
    this.name = "LockLostError";
    this.key = key;
    this.token = token;
  }
};
var LockAbortedError = class extends LockError {
  /** The key of the aborted acquire. */
  key;
  /**
   * Creates the error.
   *
   * @param key The key.
   * @param reason The signal's reason.
   */
  constructor(key, reason) {
    super(`Acquire of "${key}" was aborted`, {
      cause: reason
    });
    this.name = "AbortError";
    this.key = key;
  }
};

// client/dial.ts
function tcpRuntime() {
  const g = globalThis;
  if (g.Deno !== void 0) return "deno";
  const versions = g.process?.versions;
  if (versions?.node !== void 0 || versions?.bun !== void 0) return "node";
  return void 0;
}
async function connectTransport(address, handlers, signal) {
  if (address.scheme === "tcp" || address.scheme === "tls") {
    const runtime = tcpRuntime();
    if (runtime === "deno") {
      const { connectTcp } = await import("./tcp.ts");
      return connectTcp(address, handlers, signal);
    }
    if (runtime === "node") {
      const { connectNodeTcp } = await import("./node_tcp.ts");
      return connectNodeTcp(address, handlers, signal);
    }
    throw new Error(`TCP address ${address.key} needs Deno, Node.js or Bun; in a browser or an edge worker use the WebSocket bridge (ws:// or wss://)`);
  }
  const { connectWebSocket: connectWebSocket2 } = await Promise.resolve().then(() => (init_ws(), ws_exports));
  return connectWebSocket2(address, handlers, signal);
}

// client/options.ts
function resolveOptions(options, addresses) {
  for (const [name, value] of Object.entries(options)) {
    if (name.endsWith("Ms") && value !== void 0 && !(typeof value === "number" && value > 0 && Number.isFinite(value))) {
      throw new TypeError(`${name} must be a positive number of milliseconds, got ${String(value)}`);
    }
  }
  const perAddress = options.connectionsPerAddress ?? (addresses === 1 ? 2 : 1);
  if (!Number.isInteger(perAddress) || perAddress < 1) {
    throw new TypeError(`connectionsPerAddress must be a whole number above 0, got ${perAddress}`);
  }
  if (options.name !== void 0) {
    const problem = clientNameError(options.name);
    if (problem !== void 0) throw new TypeError(`Invalid name: ${problem}`);
  }
  if (options.bearer !== void 0 && !/^[A-Za-z0-9._~-]+$/.test(options.bearer)) {
    throw new TypeError("bearer must be letters, digits and '-._~' only");
  }
  return {
    reconnectIntervalMs: options.reconnectIntervalMs ?? 3e3,
    connectTimeoutMs: options.connectTimeoutMs ?? 3e3,
    retryTimeoutMs: options.retryTimeoutMs ?? 1e4,
    releaseRetryMs: options.releaseRetryMs ?? 5e3,
    releaseRetryIntervalMs: options.releaseRetryIntervalMs ?? 200,
    staleConnectionMs: options.staleConnectionMs ?? 2e3,
    autoExtend: options.autoExtend ?? false,
    connect: options.connect ?? connectTransport,
    connectionsPerAddress: perAddress,
    name: options.name,
    auth: options.auth,
    sessionLocks: options.sessionLocks ?? false,
    caCerts: options.caCerts,
    bearer: options.bearer
  };
}
function checkKey(key) {
  if (typeof key === "string" && plainKey(key)) return;
  if (typeof key !== "string") throw new TypeError(`key must be a string, got ${typeof key}`);
  const problem = keyError(key);
  if (problem !== void 0) throw new TypeError(`Invalid key ${JSON.stringify(key)}: ${problem}`);
}
function plainKey(key) {
  if (key.length === 0 || key.length > MAX_KEY_BYTES) return false;
  for (let i = 0; i < key.length; i++) {
    const c = key.charCodeAt(i);
    if (c <= 32 || c >= 127) return false;
  }
  return true;
}
var MAX_SECONDS = 1e12;
function toMs(seconds, what) {
  const isLease = what === "lease";
  if (typeof seconds !== "number" || Number.isNaN(seconds) || seconds < 0 || isLease && (seconds === 0 || seconds >= MAX_SECONDS)) {
    const rule = isLease ? `a positive number of seconds below ${MAX_SECONDS}` : "0 or more seconds";
    throw new TypeError(`${what} must be ${rule}, got ${seconds}`);
  }
  if (!isLease && seconds >= MAX_SECONDS) return 0;
  if (Number.isInteger(seconds)) return seconds * 1e3;
  if (seconds < 1e-6) return 1;
  return parseSeconds(String(seconds));
}
function checkGrant(key, token) {
  checkKey(key);
  if (typeof token !== "bigint" || token < 1n || token > MAX_TOKEN) {
    throw new TypeError(`token must be a bigint from 1 to ${MAX_TOKEN}, got ${String(token)}`);
  }
}

// client/deadline_heap.ts
var DeadlineHeap = class {
  #items = [];
  #seq = 0;
  /** Number of entries. */
  get size() {
    return this.#items.length;
  }
  /** The push order the next entry will get (entries pushed before it have a smaller one). */
  get nextSeq() {
    return this.#seq;
  }
  /** The earliest entry, or `undefined` when empty. */
  peek() {
    return this.#items[0];
  }
  /** Whether `entry` is in this heap. */
  has(entry) {
    return entry.slot >= 0 && this.#items[entry.slot] === entry;
  }
  /**
   * Adds `entry` due at `due`, or moves it there if it is already in the heap (it then counts
   * as pushed now).
   */
  push(entry, due) {
    if (this.has(entry)) this.remove(entry);
    entry.due = due;
    entry.seq = this.#seq++;
    const items = this.#items;
    entry.slot = items.length;
    items.push(entry);
    this.#up(entry.slot);
  }
  /** Removes `entry`; returns whether it was in the heap. */
  remove(entry) {
    if (!this.has(entry)) return false;
    const items = this.#items;
    const at = entry.slot;
    const last = items.pop();
    entry.slot = -1;
    if (last !== entry) {
      items[at] = last;
      last.slot = at;
      if (at > 0 && before(last, items[at - 1 >> 1])) this.#up(at);
      else this.#down(at);
    }
    return true;
  }
  /** Removes and returns the earliest entry, or `undefined` when empty. */
  pop() {
    const top = this.#items[0];
    if (top !== void 0) this.remove(top);
    return top;
  }
  /** Removes every entry. */
  clear() {
    for (const entry of this.#items) entry.slot = -1;
    this.#items = [];
  }
  #up(at) {
    const items = this.#items;
    const entry = items[at];
    while (at > 0) {
      const parentAt = at - 1 >> 1;
      const parent = items[parentAt];
      if (!before(entry, parent)) break;
      items[at] = parent;
      parent.slot = at;
      at = parentAt;
    }
    items[at] = entry;
    entry.slot = at;
  }
  #down(at) {
    const items = this.#items;
    const n = items.length;
    const entry = items[at];
    for (; ; ) {
      const left = 2 * at + 1;
      if (left >= n) break;
      const right = left + 1;
      const child = right < n && before(items[right], items[left]) ? right : left;
      if (!before(items[child], entry)) break;
      items[at] = items[child];
      items[at].slot = at;
      at = child;
    }
    items[at] = entry;
    entry.slot = at;
  }
};
function before(a, b) {
  return a.due < b.due || a.due === b.due && a.seq < b.seq;
}

// client/timer.ts
var unrefTimer;
function unref(id) {
  if (typeof id === "number") unrefTimer?.(id);
  else id.unref?.();
}
var HORIZON_MS = 1e3;
var IDLE_MICROTASKS = 8;
var EARLY_MS = 1;
var TimerQueue = class {
  #heap = new DeadlineHeap();
  #weak;
  #timer;
  /** When the runtime timer is armed to fire (Infinity when it is not armed). */
  #armedFor = Infinity;
  #firing = false;
  #run = () => this.#fire();
  /** Microtasks left before an empty queue clears its runtime timer (0: not waiting). */
  #idleChecks = 0;
  /** Requests outstanding ({@linkcode hold}). */
  #holds = 0;
  #idleCheck = () => this.#idle();
  /** @param weak Whether its runtime timer lets the process exit. */
  constructor(weak) {
    this.#weak = weak;
  }
  /** Number of entries scheduled. */
  get size() {
    return this.#heap.size;
  }
  /**
   * Schedules `entry` to fire at `due` (`performance.now()` ms; never for `Infinity`),
   * replacing any earlier scheduling of it.
   */
  schedule(entry, due) {
    if (due === Infinity) {
      this.cancel(entry);
      return;
    }
    if (Number.isNaN(due)) due = 0;
    this.#heap.push(entry, due);
    if (!this.#firing && due < this.#armedFor) this.#arm(due);
  }
  /** Cancels `entry` if it is scheduled here. */
  cancel(entry) {
    if (!this.#heap.remove(entry)) return;
    if (this.#heap.size === 0 && !this.#firing) this.#emptied();
  }
  /**
   * A request is outstanding: while one is, an empty queue keeps its runtime timer (the
   * request's connection keeps the process alive anyway), so a lock taken one round trip
   * later finds it armed. Each call needs one {@linkcode unhold}.
   */
  hold() {
    this.#holds++;
  }
  /** A request held with {@linkcode hold} ended. */
  unhold() {
    if (--this.#holds === 0 && this.#heap.size === 0 && !this.#firing) this.#emptied();
  }
  /** Whether `entry` is scheduled here. */
  scheduled(entry) {
    return this.#heap.has(entry);
  }
  /**
   * Nothing left: the runtime timer must not keep the process alive (or a test's timer
   * sanitizer busy), but the next entry often comes a few microtasks later: wait for it.
   */
  #emptied() {
    if (this.#holds > 0 || this.#idleChecks > 0) return;
    this.#idleChecks = IDLE_MICROTASKS;
    queueMicrotask(this.#idleCheck);
  }
  /** Clears the runtime timer once the queue stayed empty for {@linkcode IDLE_MICROTASKS}. */
  #idle() {
    if (this.#heap.size > 0 || this.#holds > 0 || this.#timer === void 0) this.#idleChecks = 0;
    else if (--this.#idleChecks > 0) queueMicrotask(this.#idleCheck);
    else {
      this.#idleChecks = 0;
      clearTimeout(this.#timer);
      this.#timer = void 0;
      this.#armedFor = Infinity;
    }
  }
  /** Arms the runtime timer for `due`, or {@linkcode HORIZON_MS} from now if that is sooner. */
  #arm(due) {
    if (this.#timer !== void 0) clearTimeout(this.#timer);
    const now = performance.now();
    this.#armedFor = due - now <= HORIZON_MS ? due : now + HORIZON_MS;
    this.#timer = setTimeout(this.#run, Math.max(0, this.#armedFor - now));
    if (this.#weak) unref(this.#timer);
  }
  /**
   * Fires what is due. Entries scheduled meanwhile (by what fires) wait for the next turn,
   * as a fresh `setTimeout` would. One that throws does not stop the others: its error is
   * rethrown in a microtask (an uncaught error, as from a bare timer).
   */
  #fire() {
    this.#timer = void 0;
    this.#armedFor = Infinity;
    const heap = this.#heap;
    const limit = heap.nextSeq;
    const now = performance.now() + EARLY_MS;
    this.#firing = true;
    try {
      for (let top = heap.peek(); top !== void 0 && top.due <= now; top = heap.peek()) {
        if (top.seq >= limit) break;
        heap.remove(top);
        try {
          top.fire();
        } catch (error) {
          queueMicrotask(() => {
            throw error;
          });
        }
      }
    } finally {
      this.#firing = false;
      const top = heap.peek();
      if (top !== void 0) this.#arm(top.due);
    }
  }
};
var timers = new TimerQueue(false);
var weakTimers = new TimerQueue(true);
var Alarm = class {
  /** @internal */
  due = 0;
  /** @internal */
  slot = -1;
  /** @internal */
  seq = 0;
  #fn;
  /** @param fn What to call when it fires. */
  constructor(fn) {
    this.#fn = fn;
  }
  /** Calls the function. */
  fire() {
    this.#fn();
  }
};
function after(ms, fn, weak = false) {
  const queue = weak ? weakTimers : timers;
  const alarm = new Alarm(fn);
  queue.schedule(alarm, performance.now() + (ms > 0 ? ms : 0));
  return () => queue.cancel(alarm);
}

// client/lock.ts
function safetyMargin(leaseMs) {
  return Math.min(1e3, leaseMs * 0.05);
}
var EXPIRING = "its lease ran out before a renewal was confirmed";
var LockTimer = class {
  due = 0;
  slot = -1;
  seq = 0;
  #lock;
  #renewal;
  constructor(lock, renewal) {
    this.#lock = lock;
    this.#renewal = renewal;
  }
  fire() {
    if (this.#renewal) this.#lock.renewNow();
    else this.#lock.lose(EXPIRING, false);
  }
};
var LockHandle = class {
  /** The key. */
  key;
  /** This grant's fencing token: greater than every token issued before it. */
  token;
  #owner;
  #leaseMs;
  #expiresAt;
  #autoExtend;
  /** Made when `signal` is first asked for: most locks are released before anyone does. */
  #controller;
  /** Why the lock is lost (known or suspected), once it is: `signal`'s reason. */
  #lost;
  /** The server answered `N`: lost for sure, not only suspected. */
  #knownLost = false;
  #expiryTimer = new LockTimer(this, false);
  #renewTimer;
  #released;
  #detached = false;
  /** Made by the client on a grant; not for direct use. */
  constructor(key, token, owner, state) {
    this.key = key;
    this.token = token;
    this.#owner = owner;
    this.#leaseMs = state.leaseMs;
    this.#autoExtend = state.autoExtend;
    this.#expiresAt = state.grantedAt + state.leaseMs;
    this.#schedule();
  }
  /** The current lease, in seconds (as asked by the acquire or the last extend). */
  get lease() {
    return this.#leaseMs / 1e3;
  }
  /**
   * Fires when the lock is known lost (an extend answered `N`) or suspected lost (the lease
   * is about to run out and no renewal proved it, or every connection of the client is
   * down). Its reason is a {@linkcode LockLostError}. It does not fire on `release()`.
   */
  get signal() {
    if (this.#controller === void 0) {
      this.#controller = new AbortController();
      if (this.#lost !== void 0) this.#controller.abort(this.#lost);
    }
    return this.#controller.signal;
  }
  /** Whether `release()` was called. */
  get released() {
    return this.#released !== void 0;
  }
  /**
   * Resets the lease to `lease` seconds from now (default: the current lease).
   *
   * @param lease Seconds, > 0, fractions allowed.
   * @throws {LockLostError} The server answered `N`, now or before: this grant no longer
   * holds the key (`signal` fires too). After a loss that was only suspected, the server
   * is asked, and may still hold the lock.
   * @throws {LockUnavailableError} No connection could carry the request.
   * @throws {LockRejectedError} The server refused it (e.g. above its `--max-lease`).
   * @throws {TypeError} For a lease that is not a positive number, or after `release()`.
   */
  extend(lease = this.lease) {
    return this.#owner.settle(this.#extendBy(lease));
  }
  async #extendBy(lease) {
    if (!(lease > 0) || !Number.isFinite(lease)) {
      throw new TypeError(`lease must be a positive number of seconds, got ${lease}`);
    }
    if (this.#released !== void 0) throw new TypeError(`Lock "${this.key}" was released`);
    if (this.#knownLost) throw this.#lost;
    await this.#extend(toMs(lease, "lease"));
  }
  /**
   * Releases the lock. Renewal stops at once (synchronously); the release is retried for
   * 5 s every 200 ms if no connection can carry it (docs/client.md). An `N` reply also ends it: the
   * lock is gone either way. Calling it again returns the same promise.
   *
   * @throws {LockUnavailableError} If no node could be reached for 5 s (the lease will
   * free the lock).
   */
  release() {
    if (this.#released === void 0) {
      this.#stopTimers();
      this.#owner.forget(this);
      this.#released = this.#owner.release(this.key, this.token);
    }
    return this.#released;
  }
  /** Forgets the lock on this client's side (see {@linkcode Lock.detach}). */
  detach() {
    this.#detached = true;
    this.#stopTimers();
    this.#owner.forget(this);
  }
  /** Releases the lock at the end of an `await using` block (not once detached). */
  [Symbol.asyncDispose]() {
    if (this.#detached) return Promise.resolve();
    return this.release();
  }
  /**
   * Marks the lock lost: `signal` fires with a {@linkcode LockLostError}. A lock only
   * suspected lost (`known` false: its lease may have run out) stays with the client, so
   * `close()` still releases it if the server holds it after all. Internal.
   */
  lose(why, known = true) {
    this.#stopTimers();
    if (known && !this.#knownLost) {
      this.#knownLost = true;
      this.#owner.forget(this);
    }
    if (this.#lost === void 0) {
      this.#lost = new LockLostError(this.key, this.token, why);
      this.#controller?.abort(this.#lost);
    }
  }
  /** Stops timers without releasing (the client is closing). Internal. */
  stop() {
    this.#stopTimers();
  }
  async #extend(leaseMs) {
    const sentAt = performance.now();
    const held = await this.#owner.extend(this.key, this.token, leaseMs);
    if (this.#released !== void 0) return;
    if (!held) {
      const why = "the server no longer holds it for this token (extend answered N)";
      const suspected = this.#lost !== void 0;
      this.lose(why);
      throw suspected ? new LockLostError(this.key, this.token, why) : this.#lost;
    }
    this.#leaseMs = leaseMs;
    this.#expiresAt = sentAt + leaseMs;
    if (this.#lost === void 0 && !this.#detached) this.#schedule();
  }
  #schedule() {
    timers.schedule(this.#expiryTimer, this.#expiresAt - safetyMargin(this.#leaseMs));
    if (this.#autoExtend) this.#renewAt(this.#expiresAt - this.#leaseMs * 2 / 3);
  }
  /** A renewal at `at` (`performance.now()` ms); one already due goes out now. */
  #renewAt(at) {
    this.#renewTimer ??= new LockTimer(this, true);
    timers.schedule(this.#renewTimer, at);
  }
  /** The renewal timer fired. Internal. */
  renewNow() {
    this.#extend(this.#leaseMs).catch((error) => {
      if (this.#released !== void 0 || this.#lost !== void 0 || this.#detached) return;
      if (error instanceof LockUnavailableError || !(error instanceof LockLostError)) {
        this.#renewAt(performance.now() + Math.min(1e3, this.#leaseMs / 10));
      }
    });
  }
  #stopTimers() {
    timers.cancel(this.#expiryTimer);
    if (this.#renewTimer !== void 0) timers.cancel(this.#renewTimer);
  }
};

// client/exchange.ts
var Exchange = class {
  /** @internal */
  nextReceiver;
  /** @internal */
  lastReceiver;
  /** @internal */
  sentSeq = 0;
  /** The op (`A`, `R`, `X`, ...). */
  op;
  /** The key (or what stands for it in the echo). */
  key;
  /** Set when the caller gave up (abort): stop retrying. */
  abandoned = false;
  /**
   * When to stop retrying (`performance.now()` ms), if sooner than `retryTimeoutMs`: an
   * acquire's wait bounds its whole life, retries and connection attempts included.
   */
  until;
  /** When it was handed to the router (`performance.now()` ms): retries count from here. */
  startedAt = 0;
  #router;
  #connection;
  /** @param op The op. @param key The key. */
  constructor(op, key) {
    this.op = op;
    this.key = key;
  }
  /** Sent on `connection` by `router`'s first try. @internal */
  sentOn(router, connection) {
    this.#router = router;
    this.#connection = connection;
  }
  /** @internal */
  replied(reply) {
    const connection = this.#connection;
    this.#connection = void 0;
    if (replyAction(reply) === "done") {
      this.#router.served(connection);
      this.done(reply);
    } else this.#router.resume(this, connection, reply, void 0);
  }
  /** @internal */
  lost(error) {
    const connection = this.#connection;
    this.#connection = void 0;
    this.#router.resume(this, connection, void 0, error);
  }
};
var PromiseExchange = class extends Exchange {
  #line;
  #resolve;
  #reject;
  constructor(op, key, line, settle) {
    super(op, key);
    this.#line = line;
    this.#resolve = settle.resolve;
    this.#reject = settle.reject;
  }
  line(connection) {
    return this.#line(connection);
  }
  done(reply) {
    this.#resolve(reply);
  }
  failed(error) {
    this.#reject(error);
  }
};

// client/close_drain.ts
var CLOSE_DRAIN_MS = 1e3;
var CloseDrain = class {
  /** Resolves once the server closed the connection (or the bound passed) and late grants
   * were released. Never rejects. */
  done;
  #transport;
  #grants = [];
  #ended;
  #cancel = () => {
  };
  /** For `transport` (it must have `end`); {@linkcode start} half-closes it. */
  constructor(transport, options) {
    this.#transport = transport;
    const ended = new Promise((resolve) => this.#ended = resolve);
    this.done = ended.then(() => this.#grants.length > 0 ? releaseLate(this.#grants, options) : void 0).catch(() => {
    });
  }
  /** Half-closes the transport (its owner routes its lines and close here first). */
  start() {
    this.#cancel = after(CLOSE_DRAIN_MS, () => this.closed(this.#transport));
    this.#transport.ref?.(true);
    this.#transport.end();
  }
  /** A grant received on the draining connection: kept to be released (never handed on). */
  take(key, token) {
    this.#grants.push({
      key,
      token
    });
  }
  /** `transport` closed (or the bound passed): the drain is over. */
  closed(transport) {
    if (transport !== this.#transport) return;
    this.#cancel();
    transport.close();
    this.#ended();
  }
};
async function releaseLate(grants, options) {
  let left = grants.length;
  let finish;
  const finished = new Promise((resolve) => finish = resolve);
  const transport = await options.connect(options.address, {
    line: (text) => {
      const reply = parseReply(text);
      if (reply?.op === "R" && (reply.status === "R" || reply.status === "N") && --left === 0) {
        finish();
      }
    },
    closed: () => finish()
  }, AbortSignal.timeout(CLOSE_DRAIN_MS));
  const cancel = after(CLOSE_DRAIN_MS, () => finish());
  try {
    if (options.hello !== void 0) transport.send(options.hello);
    for (const { key, token } of grants) transport.send(releaseLine(key, token));
    transport.ref?.(true);
    await finished;
  } finally {
    cancel();
    transport.close();
  }
}

// client/pending_replies.ts
var ConnectionLost = class extends Error {
  /** @param address Where it was connected. @param detail Last error line from the server. */
  constructor(address, detail) {
    super(`Connection to ${address} was lost${detail ? ` (${detail})` : ""}`);
    this.name = "ConnectionLost";
  }
};
var sentSeq = 0;
var PromiseReceiver = class {
  nextReceiver;
  lastReceiver;
  sentSeq = 0;
  replied;
  lost;
  /** @param resolve Gets the reply. @param reject Gets the loss. */
  constructor(resolve, reject) {
    this.replied = resolve;
    this.lost = reject;
  }
};
var PendingReplies = class {
  #byOp = /* @__PURE__ */ new Map();
  /** Queues `receiver` behind the requests with the same (op, key), stamping its `sentSeq`. */
  add(op, key, receiver) {
    let byKey = this.#byOp.get(op);
    if (byKey === void 0) this.#byOp.set(op, byKey = /* @__PURE__ */ new Map());
    receiver.sentSeq = sentSeq++;
    receiver.nextReceiver = void 0;
    const first = byKey.get(key);
    if (first === void 0) {
      receiver.lastReceiver = receiver;
      byKey.set(key, receiver);
    } else {
      first.lastReceiver.nextReceiver = receiver;
      first.lastReceiver = receiver;
    }
  }
  /** Takes the oldest receiver of (op, key) off its queue, or `undefined` if none waits. */
  take(op, key) {
    const byKey = this.#byOp.get(op);
    const receiver = byKey?.get(key);
    if (receiver === void 0) return void 0;
    const next = receiver.nextReceiver;
    if (next === void 0) byKey.delete(key);
    else {
      next.lastReceiver = receiver.lastReceiver;
      byKey.set(key, next);
    }
    receiver.nextReceiver = receiver.lastReceiver = void 0;
    return receiver;
  }
  /** When the oldest request of (op, key) was sent (its `sentSeq`), or `Infinity` if none. */
  oldest(op, key) {
    return this.#byOp.get(op)?.get(key)?.sentSeq ?? Infinity;
  }
  /** Whether a request with this (op, key) is outstanding. */
  has(op, key) {
    return this.#byOp.get(op)?.has(key) ?? false;
  }
  /** Empties every queue; returns the receivers that were in them. */
  clear() {
    const all = [];
    for (const byKey of this.#byOp.values()) {
      for (const first of byKey.values()) {
        let receiver = first;
        while (receiver !== void 0) {
          const next = receiver.nextReceiver;
          receiver.nextReceiver = receiver.lastReceiver = void 0;
          all.push(receiver);
          receiver = next;
        }
      }
    }
    this.#byOp.clear();
    return all;
  }
};

// client/managed_connection.ts
var LOOK_SLACK_MS = 1;
var ManagedConnection = class {
  /** Where it connects. */
  address;
  #options;
  #transport;
  /** Whether the transport said hello and may carry requests. */
  #ready = false;
  #refusal;
  #connecting;
  /** What waits for replies. */
  #pending = new PendingReplies();
  #reconnectTimer;
  #lastError;
  /** Outstanding requests (pings included). */
  #outstanding = 0;
  /** Lines received so far, over all of its transports. */
  #received = 0;
  #drops = 0;
  /**
   * Signs of life for the watch: lines received, and the moments silence starts to count
   * from (a connection opened, a request sent to an idle one). Counting them costs nothing
   * per line, where reading the clock per line would.
   */
  #activity = 0;
  /** {@linkcode #activity} when the watch last looked. */
  #activitySeen = 0;
  /** When the watch last saw a sign of life (an upper bound of the last one), ms. */
  #lastHeard = 0;
  #watchAlarm = new Alarm(() => this.#watchTick());
  /** The watch's timers: weak if the transport refs itself while requests are out. */
  #watchTimers = weakTimers;
  /** The half-close of the last transport, when the client closed with acquires queued. */
  #drain;
  /** The client's close began: no request goes out, no transport is opened. */
  #closing = false;
  /** The one request whose round trip is being measured, and when it was sent. */
  #timed;
  #timedAt = 0;
  /** The hello of the current transport, until it is answered. */
  #hello;
  /** Whether a node accepted this client's hello on this connection once. */
  #helloAccepted = false;
  /** @param address Where to connect. @param options Shared settings. */
  constructor(address, options) {
    this.address = address;
    this.#options = options;
    options.closed.addEventListener("abort", this.#onClientClosed, {
      once: true
    });
  }
  #onClientClosed = () => this.#shutdown();
  /** Down, not connecting, nothing outstanding: unused (an `M`-named one may be retired). */
  get dormant() {
    return !this.up && this.#connecting === void 0 && this.#outstanding === 0 && this.#drain === void 0;
  }
  /** Stops this connection for good: no reconnect, and the client's close no longer reaches it. */
  retire() {
    this.#closing = true;
    this.#options.closed.removeEventListener("abort", this.#onClientClosed);
    this.#shutdown();
  }
  /**
   * The close's first step (client/close_drain.ts): with requests outstanding (an acquire
   * queued, a release on its way), half-closes and reads to the end; replies still reach
   * their requests, grants are released on a fresh connection, the rest fails at the close's
   * abort. Resolves at once when nothing is outstanding.
   */
  drain() {
    this.#closing = true;
    this.#ready = false;
    const transport = this.#transport;
    if (transport?.end === void 0 || this.#outstanding === 0) return Promise.resolve();
    this.#watchTimers.cancel(this.#watchAlarm);
    const { connect, hello } = this.#options;
    const drain = this.#drain = new CloseDrain(transport, {
      address: this.address,
      connect,
      hello: hello?.line
    });
    drain.start();
    return drain.done;
  }
  /** Whether requests can be sent now. */
  get up() {
    return this.#transport !== void 0 && this.#ready;
  }
  /** Why the node refused this client's last hello (`E ...`); `undefined` once one passed. */
  get refusal() {
    return this.#refusal;
  }
  /** Why the last attempt failed or the connection was lost, if it did. */
  get lastError() {
    return this.#lastError;
  }
  /** How many times it was lost so far (compare two readings to see whether it dropped). */
  get drops() {
    return this.#drops;
  }
  /** How many lines arrived so far, the hello's answer aside (compare two readings). */
  get received() {
    return this.#received;
  }
  /**
   * Checks that the node still answers: sends a probe (`?`) and resolves `true` as soon as
   * anything arrives. If nothing arrives within `graceMs`, the connection is dropped as
   * frozen (its requests move to other connections) and it resolves `false`; also `false`
   * if it is down or drops meanwhile. While a refusal may be on its way (see
   * `#refusalMayBeLate`) the grace is {@linkcode MAX_REFUSAL_DELAY_MS} longer.
   */
  probe(graceMs) {
    const transport = this.#transport;
    if (transport === void 0 || !this.#ready) return Promise.resolve(false);
    const before2 = this.#received;
    if (this.#refusalMayBeLate()) graceMs += MAX_REFUSAL_DELAY_MS;
    return new Promise((resolve) => {
      const cancel = after(graceMs, () => {
        if (this.#received !== before2) return resolve(true);
        this.#dropFrozen(transport, `no reply to a probe for ${Math.round(graceMs)} ms`);
        resolve(false);
      });
      this.request(PROBE, "-", PROBE).then(() => resolve(true), () => resolve(false)).finally(cancel);
    });
  }
  /**
   * When the oldest request with this (op, key) outstanding here was sent (its `sentSeq`),
   * or `Infinity` if there is none.
   */
  oldest(op, key) {
    return this.#pending.oldest(op, key);
  }
  /** Whether a request with this (op, key) is outstanding here. */
  outstanding(op, key) {
    return this.#pending.has(op, key);
  }
  /**
   * Connects now unless connected or connecting. Resolves `true` once usable, `false` if
   * the attempt failed (a background retry is then scheduled).
   */
  connect() {
    if (this.up) return Promise.resolve(true);
    if (this.#options.closed.aborted || this.#closing) return Promise.resolve(false);
    this.#connecting ??= this.#open().finally(() => this.#connecting = void 0);
    return this.#connecting;
  }
  /**
   * Sends a request line and resolves with the reply whose (op, key) echo matches.
   *
   * @throws {ConnectionLost} If not connected, or if the connection drops before the reply.
   */
  request(op, key, line) {
    if (!this.#ready) return Promise.reject(new ConnectionLost(this.address.key));
    return this.#request(op, key, line);
  }
  /**
   * Sends a request line; `receiver` gets the reply whose (op, key) echo matches, or hears
   * that the connection dropped first (also at once, in a microtask, if it is not up).
   */
  send(op, key, line, receiver) {
    if (!this.#ready || this.#transport === void 0) {
      queueMicrotask(() => receiver.lost(new ConnectionLost(this.address.key)));
      return;
    }
    this.#send(this.#transport, op, key, line, receiver);
  }
  #request(op, key, line) {
    const transport = this.#transport;
    if (transport === void 0) return Promise.reject(new ConnectionLost(this.address.key));
    return new Promise((resolve, reject) => {
      this.#send(transport, op, key, line, new PromiseReceiver(resolve, reject));
    });
  }
  #send(transport, op, key, line, receiver) {
    if (this.#outstanding++ === 0) {
      transport.ref?.(true);
      this.#watch();
    } else if (!this.#watchTimers.scheduled(this.#watchAlarm)) this.#watch();
    if (op !== "A" && this.#timed === void 0) {
      this.#timed = receiver;
      this.#timedAt = performance.now();
    }
    this.#pending.add(op, key, receiver);
    transport.send(line);
  }
  async #open() {
    this.#reconnectTimer?.();
    this.#reconnectTimer = void 0;
    const attempt = new AbortController();
    const cancelTimeout = after(this.#options.connectTimeoutMs, () => attempt.abort(new Error("connect timed out")));
    const onClose = () => attempt.abort(new Error("client closed"));
    this.#options.closed.addEventListener("abort", onClose, {
      once: true
    });
    let transport;
    let dead = false;
    try {
      transport = await this.#options.connect(this.address, {
        line: (text) => this.#reply(text),
        closed: (reason) => {
          dead = true;
          if (reason !== void 0) this.#lastError = reason;
          if (transport === void 0) return;
          if (this.#drain !== void 0) this.#drain.closed(transport);
          else this.#lost(transport);
        }
      }, attempt.signal);
      if (this.#options.closed.aborted || dead || this.#closing) {
        transport.close();
        if (dead) this.#scheduleReconnect();
        return false;
      }
      this.#transport = transport;
      this.#watchTimers = transport.ref === void 0 ? timers : weakTimers;
      this.#activity++;
      this.#sayHello(transport);
      this.#ready = true;
      this.#lastError = void 0;
      this.#ping();
      return true;
    } catch (error) {
      this.#lastError = error instanceof Error ? error.message : String(error);
      this.#scheduleReconnect();
      return false;
    } finally {
      cancelTimeout();
      this.#options.closed.removeEventListener("abort", onClose);
    }
  }
  /**
   * Sends the hello (when the client has one) first on a fresh connection. Its answer is not
   * waited for: the server handles lines in order, so requests may follow at once (no round
   * trip is added to a connect, and a node that froze is noticed by the requests' probes as
   * without a hello). A refusal (a wrong credential) is kept in {@linkcode refusal} before
   * the server closes the connection, so the requests it fails can say why. A node answers
   * the hello before any later line; one that answers a later line first never will, and is
   * not waited for (the hello would keep the process alive).
   */
  #sayHello(transport) {
    const hello = this.#options.hello;
    if (hello === void 0) return;
    const answered = new Promise((resolve, reject) => {
      this.#hello = new PromiseReceiver(resolve, reject);
    });
    this.#send(transport, "HELLO", "", hello.line, this.#hello);
    answered.then((reply) => {
      if (reply.status === "OK" || reply.status === "E" && reply.text === "unknown op") {
        this.#refusal = void 0;
        this.#helloAccepted = true;
        return;
      }
      this.#refusal = reply.status === "E" ? reply.text ?? "hello refused" : "hello refused";
      this.#dropFrozen(transport, this.#refusal);
    }, () => {
    });
  }
  /**
   * Measures the round trip of a fresh connection with a request that changes nothing: an
   * unknown op, answered `? - E unknown op` by any node (docs/protocol.md). Sent before anything
   * else, so the latency is known before the first grant arrives.
   */
  #ping() {
    this.request(PROBE, "-", PROBE).catch(() => {
    });
  }
  /**
   * Keeps an eye on a connection while requests are outstanding on it: looks every third of
   * `staleAfterMs`, probes it once it was silent for that long, drops it once it was silent
   * for all of it (and for {@linkcode MAX_REFUSAL_DELAY_MS} more while a refusal may be on its
   * way).
   */
  #watch() {
    if (this.#outstanding === 0) return;
    const now = performance.now();
    this.#activitySeen = this.#activity;
    this.#lastHeard = now;
    this.#watchTimers.schedule(this.#watchAlarm, now + this.#options.staleAfterMs / 3);
  }
  #watchTick() {
    const transport = this.#transport;
    if (transport === void 0 || this.#outstanding === 0) return;
    const now = performance.now();
    if (this.#activitySeen !== this.#activity) {
      this.#activitySeen = this.#activity;
      this.#lastHeard = now;
    }
    const probeMs = this.#options.staleAfterMs / 3;
    const silentMs = now - this.#lastHeard;
    const staleMs = this.#options.staleAfterMs + (this.#refusalMayBeLate() ? MAX_REFUSAL_DELAY_MS : 0);
    if (silentMs + LOOK_SLACK_MS >= staleMs) {
      this.#dropFrozen(transport, `no reply for ${Math.round(silentMs)} ms`);
      return;
    }
    this.#watchTimers.schedule(this.#watchAlarm, now + probeMs);
    if (silentMs + LOOK_SLACK_MS >= probeMs) this.#ping();
  }
  /** Closes `transport` (if still current) as frozen; it is reported lost, so its requests move on. */
  #dropFrozen(transport, why) {
    if (this.#transport !== transport) return;
    this.#lastError = why;
    transport.close();
  }
  #reply(text) {
    this.#activity++;
    const reply = parseReply(text);
    if (reply === void 0) {
      this.#received++;
      this.#lastError = `malformed reply ${JSON.stringify(text.slice(0, 100))}`;
      this.#transport?.close();
      return;
    }
    const key = reply.op === "HELLO" ? "" : reply.key;
    const receiver = this.#pending.take(reply.op, key);
    if (receiver === void 0 || receiver !== this.#hello) this.#received++;
    if (this.#hello !== void 0) {
      if (receiver === this.#hello) this.#hello = void 0;
      else this.#forgetHello();
    }
    const late = this.#drain !== void 0 && reply.op === "A" && reply.status === "A";
    if (late) this.#drain.take(reply.key, reply.token);
    if (receiver === void 0) {
      if (reply.status === "E") this.#lastError = reply.text;
      return;
    }
    if (--this.#outstanding === 0) this.#idle();
    if (receiver === this.#timed) {
      this.#timed = void 0;
      this.#options.roundTrip(performance.now() - this.#timedAt);
    }
    if (late) receiver.lost(new ConnectionLost(this.address.key, "client closed"));
    else receiver.replied(reply);
  }
  /** Nothing outstanding: the connection, and a strong watch, may let the process exit. */
  #idle() {
    this.#transport?.ref?.(false);
    if (this.#watchTimers === timers) timers.cancel(this.#watchAlarm);
  }
  /**
   * Whether silence may be a refusal on its way (a wrong credential is answered after up to
   * {@linkcode MAX_REFUSAL_DELAY_MS}): only while a credential's hello is unanswered and none
   * was ever accepted here, so a frozen node does not hold a known client's requests longer.
   */
  #refusalMayBeLate() {
    return this.#hello !== void 0 && this.#options.hello?.credential === true && !this.#helloAccepted;
  }
  /** Stops waiting for the hello's answer: a later line was answered first. */
  #forgetHello() {
    const hello = this.#pending.take("HELLO", "");
    this.#hello = void 0;
    if (hello === void 0) return;
    if (this.#timed === hello) this.#timed = void 0;
    if (--this.#outstanding === 0) this.#idle();
    hello.lost(new ConnectionLost(this.address.key, "the hello was not answered"));
  }
  #lost(transport) {
    if (this.#transport !== transport) return;
    this.#transport = void 0;
    this.#ready = false;
    this.#drops++;
    this.#failAll(this.#lastError);
    this.#scheduleReconnect();
    this.#options.lost();
  }
  #scheduleReconnect() {
    if (this.#options.closed.aborted || this.#reconnectTimer !== void 0) return;
    this.#reconnectTimer = after(this.#options.reconnectIntervalMs, () => {
      this.#reconnectTimer = void 0;
      this.connect();
    }, true);
  }
  #shutdown() {
    this.#reconnectTimer?.();
    this.#reconnectTimer = void 0;
    const transport = this.#transport;
    this.#transport = void 0;
    this.#ready = false;
    transport?.close();
    this.#failAll("client closed");
  }
  #failAll(detail) {
    this.#watchTimers.cancel(this.#watchAlarm);
    this.#hello = void 0;
    this.#outstanding = 0;
    this.#timed = void 0;
    for (const p of this.#pending.clear()) p.lost(new ConnectionLost(this.address.key, detail));
  }
};

// client/router.ts
function by(promise, until, fallback) {
  if (until === void 0) return promise;
  return new Promise((resolve) => {
    const cancel = after(until - performance.now(), () => resolve(fallback));
    promise.then((value) => {
      cancel();
      resolve(value);
    }, () => {
      cancel();
      resolve(fallback);
    });
  });
}
var REDIRECT_CONNECT_MS = 250;
var MAX_REPLY_LATENCY_MS = 100;
function sleep(ms, signal) {
  return new Promise((resolve) => {
    if (signal.aborted) return resolve();
    const done = () => {
      cancel();
      signal.removeEventListener("abort", done);
      resolve();
    };
    const cancel = after(ms, done);
    signal.addEventListener("abort", done, {
      once: true
    });
  });
}
var Router = class {
  #connections = [];
  /** The connections added for a node an `M` named (not among the client's addresses). */
  #learned = /* @__PURE__ */ new Set();
  #next = 0;
  /** The node that served the last request (`M` targets included): preferred. */
  #active;
  #options;
  #closed;
  /** Set by {@linkcode quiesce}: resolves when the close aborts. */
  #quiet;
  #lost;
  #hello;
  /** Whether this client speaks TLS: the nodes an `M` names are then reached with TLS. */
  #tls;
  /** Decaying maximum of measured round trips (ms): an upper bound of one-way latency. */
  #latency = 0;
  /**
   * @param addresses The client's addresses (one entry each).
   * @param options The client's options.
   * @param closed Aborts when the client closes.
   * @param lost Called when a connection drops.
   * @param hello The hello line sent first on every connection, if any.
   */
  constructor(addresses, options, closed, lost, hello) {
    this.#options = options;
    this.#closed = closed;
    this.#lost = lost;
    this.#hello = hello;
    this.#tls = addresses.some((a) => a.scheme === "tls");
    for (let i = 0; i < options.connectionsPerAddress; i++) {
      for (const address of addresses) this.#add(address);
    }
  }
  /** Every managed connection. */
  get connections() {
    return this.#connections;
  }
  /** An upper bound of the one-way latency seen lately, in ms (0 before any measurement). */
  get latency() {
    return this.#latency;
  }
  /**
   * The latency to allow a reply's trip when timing a wait, in ms: {@linkcode latency}, but
   * at most {@linkcode MAX_REPLY_LATENCY_MS}. A round trip longer than that was a node that
   * froze (its replies arrive in a burst when it resumes), not the network: it must not
   * stretch every later wait by seconds.
   */
  get replyLatency() {
    return Math.min(this.#latency, MAX_REPLY_LATENCY_MS);
  }
  /** Starts connecting every connection in the background. */
  start() {
    for (const connection of this.#connections) connection.connect();
  }
  /**
   * The client's close began (client/close_drain.ts): until the close aborts, nothing more is
   * sent and no connection is opened; a request that would retry waits for the abort.
   * Resolves once every connection with requests outstanding was drained.
   */
  quiesce() {
    this.#quiet ??= new Promise((resolve) => {
      if (this.#closed.aborted) resolve();
      else this.#closed.addEventListener("abort", () => resolve(), {
        once: true
      });
    });
    return Promise.all(this.#connections.map((c) => c.drain())).then(() => {
    });
  }
  /**
   * Sends one request until it gets a final reply: moves to the next connection when one
   * drops (failing after as many attempts as connections), follows `M`, and waits out a
   * cluster with no active node for up to `retryTimeoutMs`.
   *
   * @param line Builds the line for the connection it goes out on (an acquire asks for the
   * wait that is left).
   * @throws {LockUnavailableError} No connection could carry it.
   * @throws {LockError} The client closed.
   */
  exchange(op, key, line) {
    return new Promise((resolve, reject) => {
      const exchange = new PromiseExchange(op, key, line, {
        resolve,
        reject
      });
      exchange.startedAt = performance.now();
      this.send(exchange);
    });
  }
  /**
   * Sends `exchange` as {@linkcode exchange} does, telling it the final reply (`done`) or
   * the error (`failed`). Its first try goes out at once (synchronously) when a connection
   * is up. Set its `startedAt` first.
   */
  send(exchange) {
    if (!this.#closed.aborted && this.#quiet === void 0 && !exchange.abandoned) {
      const connection = this.#pick(exchange.op, exchange.key);
      if (connection !== void 0) {
        exchange.sentOn(this, connection);
        connection.send(exchange.op, exchange.key, exchange.line(connection), exchange);
        return;
      }
    }
    this.#retry(exchange, void 0);
  }
  /** `connection` served a request: its node is preferred from now on. @internal */
  served(connection) {
    this.#active = connection.address.key;
  }
  /**
   * The first try of `exchange` on `connection` did not end it (it dropped, or the answer
   * was `M` or a retry): the retry loop takes over, in a microtask (as after an await), not
   * in the middle of the connection's own work. @internal
   */
  resume(exchange, connection, reply, error) {
    const outcome = {
      connection,
      reply,
      error
    };
    queueMicrotask(() => this.#retry(exchange, outcome));
  }
  #retry(exchange, first) {
    this.#loop(exchange, first).then((reply) => exchange.done(reply), (error) => exchange.failed(error));
  }
  /** The retry loop of {@linkcode exchange}, after a first try that did not end it. */
  async #loop(ex, first) {
    const { op, key } = ex;
    const closed = this.#closed;
    let giveUpAt = Math.min(performance.now() + this.#options.retryTimeoutMs, ex.until ?? Infinity);
    const held = (since, reply) => {
      if (op !== "A" || reply === void 0) return;
      giveUpAt = Math.min(giveUpAt + (performance.now() - since), ex.until ?? Infinity);
    };
    const connectBy = (redirected = false) => {
      const until = ex.until;
      if (until === void 0) return until;
      const now = performance.now();
      if (!this.#connections.some((c) => c.up)) {
        return Math.max(until, now + this.#options.connectTimeoutMs);
      }
      return redirected ? Math.max(until, now + REDIRECT_CONNECT_MS) : until;
    };
    let failures = 0;
    let lastProblem = "";
    let target;
    let backoff = 25;
    let hops = 0;
    const dropped = /* @__PURE__ */ new Set();
    const unavailable = () => new LockUnavailableError(`No usable lockd connection for ${op} "${key}" (${[
      ...new Set(this.#connections.map((c) => addressText(c.address)))
    ].join(", ")})` + (lastProblem ? `: ${lastProblem}` : ""));
    const pause = async () => {
      if (performance.now() + backoff > giveUpAt) throw unavailable();
      await sleep(backoff, closed);
      backoff = Math.min(backoff * 2, 200);
    };
    let outcome = first;
    for (; ; ) {
      if (outcome === void 0) {
        if (this.#quiet !== void 0) await this.#quiet;
        if (closed.aborted) throw new LockError("The client is closed");
        if (ex.abandoned) throw new LockError("Abandoned");
        let connection2 = target ?? this.#pick(op, key);
        const redirected = target !== void 0;
        target = void 0;
        if (connection2 !== void 0 && !connection2.up && !await by(connection2.connect(), connectBy(redirected), false)) {
          if (connection2.refusal !== void 0) {
            throw new LockRejectedError(op, key, connection2.refusal);
          }
          lastProblem = `${addressText(connection2.address)} is unreachable`;
          if (this.#active === connection2.address.key) this.#active = void 0;
          await pause();
          continue;
        }
        connection2 ??= await by(this.#anyUp(), connectBy(), void 0);
        if (connection2 === void 0) {
          const refusal = this.#connections.find((c) => c.refusal !== void 0)?.refusal;
          if (refusal !== void 0) throw new LockRejectedError(op, key, refusal);
          const reasons = [
            ...new Set(this.#connections.map((c) => c.lastError).filter((e) => e))
          ];
          lastProblem = reasons.length > 0 ? reasons.join("; ") : "no node could be reached";
          if (++failures >= this.#connections.length || performance.now() >= (ex.until ?? Infinity)) {
            throw unavailable();
          }
          continue;
        }
        if (closed.aborted) throw new LockError("The client is closed");
        if (this.#quiet !== void 0) continue;
        if (ex.abandoned) throw new LockError("Abandoned");
        const sentAt = performance.now();
        try {
          outcome = {
            connection: connection2,
            reply: await connection2.request(op, key, ex.line(connection2)),
            error: void 0
          };
        } catch (error2) {
          outcome = {
            connection: connection2,
            reply: void 0,
            error: error2
          };
        }
        held(sentAt, outcome.reply);
      }
      const { connection, reply, error } = outcome;
      outcome = void 0;
      if (reply === void 0) {
        if (!(error instanceof ConnectionLost)) throw error;
        if (connection.refusal !== void 0) {
          throw new LockRejectedError(op, key, connection.refusal);
        }
        lastProblem = error.message;
        dropped.add(connection.address.key);
        if (this.#active === connection.address.key) this.#active = void 0;
        if (++failures >= this.#connections.length && !this.#connections.some((c) => c.up)) {
          throw unavailable();
        }
        continue;
      }
      const action = replyAction(reply);
      if (action === "redirect") {
        target = this.#connectionFor(reply.text);
        if (++hops > 3) await pause();
        if (target === connection) target = void 0;
        else this.#active = target?.address.key;
        lastProblem = `redirected to ${reply.text}`;
        const back = target !== void 0 && dropped.has(target.address.key);
        if (back && performance.now() >= (ex.until ?? Infinity)) throw unavailable();
        if (target === void 0) await pause();
        continue;
      }
      if (action === "retry") {
        lastProblem = `${addressText(connection.address)} answered "${reply.text}"`;
        await pause();
        continue;
      }
      this.#active = connection.address.key;
      return reply;
    }
  }
  /**
   * Sends one request to the node at `addressKey` itself (an address the client was given):
   * no redirect is followed and no other node is asked. Tries each connection to it once,
   * connecting it if needed.
   *
   * @throws {LockUnavailableError} No connection to that node could carry it.
   * @throws {LockRejectedError} It refused this client's hello.
   * @throws {LockError} The client closed.
   */
  async direct(addressKey, op, key, line) {
    const connections = this.#connections.filter((c) => c.address.key === addressKey).sort((a, b) => Number(b.up) - Number(a.up));
    let problem = "the client has no connection to it";
    for (const connection of connections) {
      if (this.#closed.aborted) throw new LockError("The client is closed");
      if (!connection.up && !await connection.connect()) {
        if (connection.refusal !== void 0) {
          throw new LockRejectedError(op, key, connection.refusal);
        }
        problem = connection.lastError ?? "unreachable";
        continue;
      }
      try {
        return await connection.request(op, key, line);
      } catch (error) {
        if (!(error instanceof ConnectionLost)) throw error;
        if (connection.refusal !== void 0) {
          throw new LockRejectedError(op, key, connection.refusal);
        }
        problem = error.message;
      }
    }
    if (this.#closed.aborted) throw new LockError("The client is closed");
    const where = connections.length > 0 ? addressText(connections[0].address) : addressKey;
    throw new LockUnavailableError(`No usable connection to ${where}: ${problem}`);
  }
  #add(address) {
    const connection = new ManagedConnection(address, {
      connect: this.#options.connect,
      reconnectIntervalMs: this.#options.reconnectIntervalMs,
      connectTimeoutMs: this.#options.connectTimeoutMs,
      closed: this.#closed,
      roundTrip: (ms) => this.#latency = Math.max(ms, this.#latency * 0.9),
      staleAfterMs: this.#options.staleConnectionMs,
      lost: () => this.#lost(),
      // A bridge speaks for its pages: they do not say hello to it.
      hello: address.url === void 0 ? this.#hello : void 0
    });
    this.#connections.push(connection);
    return connection;
  }
  /**
   * The next connection, round-robin over those usable now: those of the known active node
   * first and, for an acquire, those without an earlier acquire of the same key outstanding
   * (the server answers those in order, so a try-lock would wait behind a long wait).
   * A release or extend of a key with an acquire waiting is the exception (see inside).
   * Counted in place, without making the lists.
   */
  #pick(op, key) {
    const all = this.#connections;
    const active = this.#active;
    let up = 0;
    let preferred = 0;
    for (let i = 0; i < all.length; i++) {
      const c = all[i];
      if (!c.up) continue;
      up++;
      if (c.address.key === active) preferred++;
    }
    if (up === 0) return void 0;
    const onlyActive = preferred > 0;
    let size = onlyActive ? preferred : up;
    let onlyFree = false;
    if (op === "A" && size > 1) {
      let free = 0;
      for (let i = 0; i < all.length; i++) {
        const c = all[i];
        if (c.up && (!onlyActive || c.address.key === active) && !c.outstanding(op, key)) free++;
      }
      if (free > 0) {
        onlyFree = true;
        size = free;
      }
    }
    if (size > 1 && (op === "R" || op === "X")) {
      let best;
      let oldest = Infinity;
      for (let i = 0; i < all.length; i++) {
        const c = all[i];
        if (!c.up || onlyActive && c.address.key !== active) continue;
        const sent = c.oldest("A", key);
        if (sent < oldest) [best, oldest] = [
          c,
          sent
        ];
      }
      if (best !== void 0) return best;
    }
    let index = this.#next++ % size;
    for (let i = 0; i < all.length; i++) {
      const c = all[i];
      if (!c.up || onlyActive && c.address.key !== active) continue;
      if (onlyFree && c.outstanding(op, key)) continue;
      if (index-- === 0) return c;
    }
    return void 0;
  }
  /** Connects every idle connection now and resolves with the first that comes up. */
  async #anyUp() {
    const attempts = this.#connections.map(async (c) => await c.connect() ? c : void 0);
    return await Promise.any(attempts.map(async (a) => await a ?? Promise.reject(new Error("down")))).catch(() => void 0);
  }
  /** The connection to the node an `M` reply names, added if the client had none. */
  #connectionFor(addressText2) {
    let address;
    try {
      address = parseAddress(addressText2);
    } catch {
      return void 0;
    }
    if (address.scheme === "tcp" && this.#tls) {
      address = {
        ...address,
        scheme: "tls",
        caCerts: this.#options.caCerts
      };
    }
    const known = this.#connections.find((c) => c.address.key === address.key);
    if (known !== void 0) return known;
    this.#retireDormant();
    const added = this.#add(address);
    this.#learned.add(added);
    return added;
  }
  /**
   * Drops the connections an `M` added that are down and unused: a cluster whose nodes come
   * back at new addresses (a container's new IP on each restart) would otherwise leave one
   * connection per old address, retried forever (docs/client.md, "Connections").
   */
  #retireDormant() {
    if (this.#learned.size === 0) return;
    const kept = [];
    for (const c of this.#connections) {
      if (this.#learned.has(c) && c.dormant) {
        this.#learned.delete(c);
        c.retire();
        if (this.#active === c.address.key) this.#active = void 0;
      } else kept.push(c);
    }
    this.#connections = kept;
  }
};

// client/requests.ts
var REPLY_MARGIN_MS = 200;
var PROBE_GRACE_MS = 500;
function unexpected(reply) {
  if (reply.status === "E") return new LockRejectedError(reply.op, reply.key, reply.text ?? "");
  return new LockError(`Unexpected reply to ${reply.op} "${reply.key}": ${reply.status}`);
}
function acquire(ctx, params, granted) {
  const signal = params.signal;
  if (signal?.aborted) return Promise.reject(new LockAbortedError(params.key, signal.reason));
  return new AcquireRequest(ctx, params, granted).start();
}
var AcquireRequest = class extends Exchange {
  /** @internal The wait's deadline, as a timer entry. */
  due = 0;
  /** @internal */
  slot = -1;
  /** @internal */
  seq = 0;
  leaseMs;
  waitMs;
  session;
  autoExtend;
  signal;
  #ctx;
  #granted;
  #resolve;
  #reject;
  /** While `start()` runs: the first line goes out now, at `startedAt`. */
  #starting = true;
  #sentAt = 0;
  #sends = 0;
  /** What the deadline of the latest send looks at. */
  #connection;
  #received = 0;
  #drops = 0;
  #send = 0;
  #onAbort;
  constructor(ctx, params, granted) {
    super("A", params.key);
    this.#ctx = ctx;
    this.#granted = granted;
    this.leaseMs = params.leaseMs;
    this.waitMs = params.waitMs;
    this.session = params.session;
    this.autoExtend = params.autoExtend;
    this.signal = params.signal;
    const started = performance.now();
    this.startedAt = started;
    if (this.waitMs !== 0) {
      this.until = started + this.waitMs + REPLY_MARGIN_MS + 2 * ctx.router.replyLatency;
    }
  }
  start() {
    const promise = new Promise((resolve, reject) => {
      this.#resolve = resolve;
      this.#reject = reject;
    });
    const signal = this.signal;
    if (signal !== void 0) {
      this.#onAbort = () => this.#giveUp(new LockAbortedError(this.key, signal.reason));
      signal.addEventListener("abort", this.#onAbort, {
        once: true
      });
    }
    this.#ctx.begin();
    this.#ctx.router.send(this);
    this.#starting = false;
    return promise;
  }
  line(connection) {
    const sentAt = this.#starting ? this.startedAt : performance.now();
    this.#sentAt = sentAt;
    const waitMs = this.waitMs;
    const left = waitMs === 0 ? 0 : Math.max(1, Math.ceil(waitMs - (sentAt - this.startedAt)));
    if (left > 0) {
      this.#send = ++this.#sends;
      this.#connection = connection;
      this.#received = connection.received;
      this.#drops = connection.drops;
      timers.schedule(this, sentAt + left + REPLY_MARGIN_MS + 2 * this.#ctx.router.replyLatency);
    }
    return acquireLine(this.key, this.leaseMs, left, this.session);
  }
  /**
   * The wait (plus a margin for the reply's trip) is over: a connection that answered
   * anything since the request went out is alive and the answer is T; one that stayed
   * silent is probed, and dropped if the probe goes unanswered, which moves the request to
   * the next connection; one that dropped meanwhile leaves it to the retry loop. @internal
   */
  fire() {
    this.#ctx.track(this.#deadline(this.#connection, this.#received, this.#send));
  }
  async #deadline(connection, received, send) {
    if (connection.drops !== this.#drops) return;
    if (connection.up && connection.received === received) {
      const graceMs = Math.min(this.#ctx.options.staleConnectionMs, PROBE_GRACE_MS + 4 * this.#ctx.router.replyLatency);
      if (!await connection.probe(graceMs)) return;
      if (this.abandoned || send !== this.#sends) return;
    }
    this.#giveUp(new LockTimeoutError(this.key, this.waitMs / 1e3));
  }
  #giveUp(error) {
    if (this.abandoned) return;
    this.abandoned = true;
    this.#cleanup();
    this.#ctx.fail(this.#reject, error);
  }
  #cleanup() {
    timers.cancel(this);
    if (this.#onAbort !== void 0) this.signal.removeEventListener("abort", this.#onAbort);
  }
  done(reply) {
    this.#cleanup();
    this.#ctx.end();
    if (this.abandoned) {
      if (reply.status === "A") this.#ctx.track(release(this.#ctx, this.key, reply.token));
      return;
    }
    try {
      this.#resolve(this.#settle(reply));
    } catch (error) {
      this.#ctx.fail(this.#reject, error);
    }
  }
  failed(error) {
    this.#cleanup();
    this.#ctx.end();
    if (!this.abandoned) this.#ctx.fail(this.#reject, error);
  }
  #settle(reply) {
    if (reply.status === "A") {
      const latency = this.#ctx.router.latency;
      const sentAt = this.#sentAt;
      return this.#granted(this, reply.token, latency > 0 ? Math.max(sentAt, performance.now() - latency) : sentAt);
    }
    if (reply.status === "T") throw new LockTimeoutError(this.key, this.waitMs / 1e3);
    throw unexpected(reply);
  }
};
async function extend(ctx, key, token, leaseMs) {
  const reply = await ctx.router.exchange("X", key, () => extendLine(key, token, leaseMs));
  if (reply.status === "X") return true;
  if (reply.status === "N") return false;
  throw unexpected(reply);
}
function release(ctx, key, token) {
  return new ReleaseRequest(ctx, key, token, true).start();
}
function releaseLock(ctx, key, token) {
  return new ReleaseRequest(ctx, key, token, false).start();
}
var ReleaseRequest = class extends Exchange {
  /** @internal The bound, as a timer entry. */
  due = 0;
  /** @internal */
  slot = -1;
  /** @internal */
  seq = 0;
  #ctx;
  #token;
  #line;
  #answer;
  #resolve;
  #reject;
  #until = 0;
  /** Reported unconfirmed: what the attempt in flight gets is no longer anyone's. */
  #late = false;
  constructor(ctx, key, token, answer) {
    super("R", key);
    this.#ctx = ctx;
    this.#token = token;
    this.#answer = answer;
  }
  start() {
    const promise = new Promise((resolve, reject) => {
      this.#resolve = resolve;
      this.#reject = reject;
    });
    const now = performance.now();
    this.#until = now + this.#ctx.options.releaseRetryMs;
    timers.schedule(this, this.#until);
    this.#attempt(now);
    return promise;
  }
  #attempt(now) {
    this.startedAt = now;
    this.#ctx.begin();
    this.#ctx.router.send(this);
  }
  line() {
    return this.#line ??= releaseLine(this.key, this.#token);
  }
  /** `releaseRetryMs` passed with no confirmation. @internal */
  fire() {
    this.#late = true;
    this.#ctx.fail(this.#reject, new LockUnavailableError(`Release of "${this.key}" not confirmed in time`));
  }
  done(reply) {
    this.#ctx.end();
    if (this.#late) return;
    timers.cancel(this);
    if (reply.status === "R" || reply.status === "N") {
      this.#resolve(this.#answer ? reply.status === "R" : void 0);
    } else this.#ctx.fail(this.#reject, unexpected(reply));
  }
  failed(error) {
    this.#ctx.end();
    if (this.#late) return;
    const { options, closed } = this.#ctx;
    const retry = error instanceof LockUnavailableError && !closed.aborted && performance.now() + options.releaseRetryIntervalMs < this.#until;
    if (!retry) {
      timers.cancel(this);
      this.#ctx.fail(this.#reject, error);
      return;
    }
    sleep(options.releaseRetryIntervalMs, closed).then(() => this.#attempt(performance.now()));
  }
};

// client/inspect.ts
function keyStateFrom(reply) {
  if (reply.status !== "I" && reply.status !== "F") throw unexpected(reply);
  const state = keyStateOf(reply);
  if (state === void 0) throw new LockError(`Malformed reply to I "${reply.key}"`);
  return state;
}
async function inspectKey(router, key) {
  return keyStateFrom(await router.exchange("I", key, () => inspectLine(key)));
}
function locksOptions(options) {
  const prefix = options.prefix || void 0;
  if (prefix !== void 0) {
    const problem = typeof prefix === "string" ? keyError(prefix) : "it is not a string";
    if (problem !== void 0) {
      throw new TypeError(`Invalid prefix ${JSON.stringify(prefix)}: ${problem}`);
    }
  }
  const limit = options.limit ?? MAX_LOCKS_LIMIT;
  if (!Number.isInteger(limit) || limit < 1) {
    throw new TypeError(`limit must be a whole number above 0, got ${limit}`);
  }
  return {
    prefix,
    limit
  };
}
var LAST_KEY_BEFORE_DASH = "," + "\uFFFF".repeat(Math.floor((MAX_KEY_BYTES - 1) / 3));
async function listLocks(router, { prefix, limit }) {
  const field = prefix ?? "-";
  const dash = prefix === "-";
  const sent = dash ? void 0 : prefix;
  const out = [];
  let after2 = dash ? LAST_KEY_BEFORE_DASH : void 0;
  for (; ; ) {
    const want = Math.min(MAX_LOCKS_LIMIT, limit - out.length);
    const reply = await router.exchange("L", field, () => locksLine(sent, want, after2));
    if (reply.status !== "L") throw unexpected(reply);
    const page = locksPageOf(reply);
    if (page === void 0) throw new LockError(`Malformed reply to L "${field}"`);
    for (const info of page.locks.slice(0, want)) {
      const state = keyStateOfInfo(info);
      if (state === void 0) throw new LockError(`Malformed entry in a reply to L "${field}"`);
      if (dash && !state.key.startsWith("-")) return out;
      out.push(state);
    }
    if (!page.more || out.length >= limit || page.locks.length === 0) return out;
    after2 = out[out.length - 1].key;
  }
}
function nodeStatuses(router, addresses) {
  return Promise.all(addresses.map(async (to) => {
    const address = addressText(to);
    try {
      const reply = await router.direct(to.key, "S", "-", statusLine());
      const status = nodeStatusOf(reply);
      if (status !== void 0) return {
        address,
        status
      };
      if (reply.status === "E") return {
        address,
        error: reply.text ?? "refused"
      };
      return {
        address,
        error: `unexpected reply ${reply.status}`
      };
    } catch (error) {
      return {
        address,
        error: error instanceof Error ? error.message : String(error)
      };
    }
  }));
}

// client/identity.ts
function newSessionId() {
  return randomHex(16);
}
function defaultClientName() {
  return `client-${randomHex(4)}`;
}
function randomHex(bytes) {
  let text = "";
  for (const b of crypto.getRandomValues(new Uint8Array(bytes))) {
    text += b.toString(16).padStart(2, "0");
  }
  return text;
}

// client/close_gate.ts
var CloseGate = class {
  #inflight = 0;
  #idle;
  /** Rejections held since `close()` began; `undefined` while open or once closed. */
  #held;
  /**
   * A request is on its way. While any is, the client's timers keep their runtime timer
   * armed (client/timer.ts): the lock it may bring back schedules its lease warning there.
   */
  begin() {
    if (this.#inflight++ === 0) timers.hold();
  }
  /** A request that began has ended. */
  end() {
    if (--this.#inflight > 0) return;
    timers.unhold();
    this.#idle?.();
  }
  /** Rejects with `error` now, or, while the client closes, when `close()` ends. */
  fail(reject, error) {
    if (this.#held === void 0) reject(error);
    else this.#held.push(() => reject(error));
  }
  /** `promise`, but a rejection goes through {@linkcode fail} (a public method's result). */
  settle(promise) {
    return promise.catch((error) => new Promise((_, reject) => this.fail(reject, error)));
  }
  /** `close()` began: rejections wait from now on. */
  hold() {
    this.#held ??= [];
  }
  /** Resolves once no request is on its way. */
  async idle() {
    if (this.#inflight > 0) await new Promise((resolve) => this.#idle = resolve);
    this.#idle = void 0;
  }
  /** `close()` ends: the held rejections happen now, and later ones at once. */
  open() {
    const held = this.#held ?? [];
    this.#held = void 0;
    for (const reject of held) reject();
  }
};

// client/client.ts
var clientInternals = /* @__PURE__ */ new WeakMap();
var LockClient = class {
  #router;
  #closing = new AbortController();
  #closed;
  #locks = /* @__PURE__ */ new Set();
  #background = /* @__PURE__ */ new Set();
  /** Requests on their way, and the rejections held back while closing. */
  #gate = new CloseGate();
  #options;
  #owner;
  #requests;
  #session;
  /** The addresses the client was given (canonical forms), for `status()`. */
  #addresses;
  /**
   * Creates a client and starts connecting in the background.
   *
   * @param servers One address or several (a cluster, any order): `host:port`,
   * `tcp://host:port`, `ws://...` or `wss://...` (a bridge). One address gets two connections.
   * @param options Timings in milliseconds and defaults.
   * @throws {TypeError} If no address is given, one is not a string, or one cannot be parsed.
   */
  constructor(servers, options = {}) {
    const list = serverList(servers);
    const addresses = /* @__PURE__ */ new Map();
    const id = crypto.randomUUID();
    const session = newSessionId();
    for (const text of list) {
      const address = parseAddress(text);
      if (address.url !== void 0) {
        const url = new URL(address.url);
        url.searchParams.set("client", id);
        address.url = url.href;
      }
      addresses.set(address.key, address);
    }
    this.#options = resolveOptions(options ?? {}, addresses.size);
    this.#addresses = [
      ...addresses.values()
    ];
    const resolved = this.#options;
    for (const address of addresses.values()) {
      if (address.scheme === "tls") address.caCerts = resolved.caCerts;
      if (address.url !== void 0) address.bearer = resolved.bearer;
    }
    this.#session = session;
    this.#router = new Router([
      ...addresses.values()
    ], this.#options, this.#closing.signal, () => this.#connectionLost(), {
      session,
      line: helloLine({
        session,
        name: resolved.name ?? defaultClientName(),
        credential: resolved.auth
      }),
      credential: resolved.auth !== void 0
    });
    this.#requests = {
      router: this.#router,
      options: this.#options,
      closed: this.#closing.signal,
      track: (promise) => this.#track(promise),
      begin: () => this.#gate.begin(),
      end: () => this.#gate.end(),
      fail: (reject, error) => this.#gate.fail(reject, error)
    };
    this.#owner = {
      extend: (key, token, leaseMs) => extend(this.#requests, key, token, leaseMs),
      release: (key, token) => releaseLock(this.#requests, key, token),
      forget: (lock) => this.#locks.delete(lock),
      settle: (promise) => this.#gate.settle(promise)
    };
    this.#router.start();
    clientInternals.set(this, {
      exchange: (op, key, line) => this.#router.exchange(op, key, () => line),
      release: (key, token) => releaseLock(this.#requests, key, token)
    });
  }
  /** Number of managed connections (two for a single address). */
  get connections() {
    return this.#router.connections.length;
  }
  /** Number of connections usable right now. */
  get connected() {
    return this.#router.connections.filter((c) => c.up).length;
  }
  /**
   * Acquires `key`, queueing behind earlier waiters for at most `wait` seconds.
   *
   * @param key 1–250 bytes of UTF-8, no whitespace or control characters.
   * @param options Lease and wait in seconds, an abort signal, auto-extension.
   * @returns The held {@linkcode Lock}.
   * @throws {LockTimeoutError} The wait ran out (`T`): nothing is held.
   * @throws {LockUnavailableError} No connection could carry the request.
   * @throws {LockRejectedError} The server refused it (`E`), e.g. a lease above its limit.
   * @throws {LockAbortedError} `signal` fired first; a later grant is released at once.
   * @throws {TypeError} For an invalid key, lease or wait (nothing is sent).
   *
   * @example Wait up to 5 s for a 30 s lease
   * ```ts
   * import { LockClient, LockTimeoutError } from "@lockd/client";
   * const client = new LockClient("127.0.0.1:7321");
   * try {
   *   const lock = await client.acquire("orders:17", { lease: 30, wait: 5 });
   *   console.log(lock.token); // e.g. 1042n
   *   await lock.release();
   * } catch (error) {
   *   if (!(error instanceof LockTimeoutError)) throw error;
   * } finally {
   *   await client.close();
   * }
   * ```
   */
  acquire(key, options = {}) {
    options ??= {};
    if (this.#closed !== void 0) return Promise.reject(new LockError("The client is closed"));
    try {
      checkKey(key);
      return acquire(this.#requests, {
        key,
        leaseMs: toMs(options.lease ?? 30, "lease"),
        waitMs: toMs(options.wait ?? 0, "wait"),
        session: options.session ?? this.#options.sessionLocks,
        autoExtend: options.autoExtend ?? this.#options.autoExtend,
        signal: options.signal
      }, this.#granted);
    } catch (error) {
      return Promise.reject(error);
    }
  }
  /** Makes the `Lock` of a grant (one function for every acquire, not a closure each). */
  #granted = (request, token, grantedAt) => {
    const lock = new LockHandle(request.key, token, this.#owner, {
      leaseMs: request.leaseMs,
      grantedAt,
      autoExtend: request.autoExtend
    });
    this.#locks.add(lock);
    if (this.#closed !== void 0) {
      this.#track(lock.release());
      throw new LockError("The client is closed");
    }
    return lock;
  };
  /**
   * Takes `key` only if it is free now: never queues behind a holder.
   *
   * @returns The {@linkcode Lock}, or `null` if someone else holds it.
   * @throws {LockUnavailableError} No connection could carry the request.
   * @throws {LockRejectedError} The server refused it (`E`).
   * @throws {LockAbortedError} `signal` fired first.
   *
   * @example Skip the work if someone else is doing it
   * ```ts
   * import { LockClient } from "@lockd/client";
   * const client = new LockClient("127.0.0.1:7321");
   * const lock = await client.tryAcquire("nightly-report", { lease: 60 });
   * if (lock === null) console.log("already running elsewhere");
   * else await lock.release();
   * await client.close();
   * ```
   */
  async tryAcquire(key, options = {}) {
    try {
      return await this.acquire(key, {
        ...options,
        wait: 1e-3
      });
    } catch (error) {
      if (error instanceof LockTimeoutError) return null;
      throw error;
    }
  }
  async withLock(key, optionsOrFn, maybeFn) {
    const fn = typeof optionsOrFn === "function" ? optionsOrFn : maybeFn;
    const options = typeof optionsOrFn === "function" ? {} : optionsOrFn;
    if (typeof fn !== "function") throw new TypeError("withLock needs a function to run");
    const lock = await this.acquire(key, options);
    let result;
    try {
      result = await fn(lock);
    } catch (error) {
      await lock.release().catch(() => {
      });
      throw error;
    }
    await lock.release().catch((error) => {
      if (!(error instanceof LockUnavailableError)) throw error;
    });
    return result;
  }
  /**
   * Inspects `key` without changing anything (`I`, docs/protocol.md, "Inspection"): its
   * holder's token, client name and lease left (seconds), and how many acquires wait.
   *
   * @throws {LockUnavailableError} No connection could carry the request.
   * @throws {LockRejectedError} The server refused it (outside the credential's prefix).
   * @throws {TypeError} For an invalid key (nothing is sent).
   *
   * @example Who holds a key
   * ```ts
   * import { LockClient } from "@lockd/client";
   * const client = new LockClient("127.0.0.1:7321");
   * const state = await client.inspect("orders:17");
   * if (state.held) console.log(`${state.holder} holds it, ${state.leaseLeft} s left`);
   * await client.close();
   * ```
   */
  inspect(key) {
    return this.#call(() => (checkKey(key), inspectKey(this.#router, key)));
  }
  /**
   * Held keys, in key order (`L`, paged until done or `limit`, default 1000): the same
   * fields as {@linkcode inspect}. Keys may change between pages.
   *
   * @throws {LockUnavailableError} No connection could carry a request.
   * @throws {LockRejectedError} The server refused it (a prefix outside the credential's).
   * @throws {TypeError} For an invalid prefix or limit (nothing is sent).
   *
   * @example Every held key under `orders:`
   * ```ts
   * import { LockClient } from "@lockd/client";
   * const client = new LockClient("127.0.0.1:7321");
   * for (const lock of await client.locks({ prefix: "orders:" })) console.log(lock.key);
   * await client.close();
   * ```
   */
  locks(options = {}) {
    return this.#call(() => listLocks(this.#router, locksOptions(options ?? {})));
  }
  /**
   * Asks every address the client was given for its node's status (`S`), each node itself
   * (standbys too, no redirect), at once. Never rejects: a node that could not answer has
   * an `error` instead of a `status`.
   *
   * @example A cluster at a glance
   * ```ts
   * import { LockClient } from "@lockd/client";
   * const client = new LockClient(["10.0.0.1:7321", "10.0.0.2:7321"]);
   * for (const node of await client.status()) console.log(node.address, node.status?.role);
   * await client.close();
   * ```
   */
  status() {
    return nodeStatuses(this.#router, this.#addresses);
  }
  /**
   * Releases the grant of `key` carrying `token` (held by any process: a lock taken by a
   * script and released by another), retried as a `Lock`'s release is.
   *
   * @returns `true` if it released (`R`), `false` if that token did not hold the key (`N`).
   * @throws {LockUnavailableError} No node confirmed it within `releaseRetryMs`.
   * @throws {LockRejectedError} The server refused it.
   * @throws {TypeError} For an invalid key or token (nothing is sent).
   *
   * @example Release by token
   * ```ts
   * import { LockClient } from "@lockd/client";
   * const client = new LockClient("127.0.0.1:7321");
   * console.log(await client.release("orders:17", 1042n)); // true or false
   * await client.close();
   * ```
   */
  release(key, token) {
    return this.#call(() => (checkGrant(key, token), release(this.#requests, key, token)));
  }
  /**
   * Resets the lease of the grant of `key` carrying `token` to `lease` seconds from now.
   *
   * @returns `true` if it extended (`X`), `false` if that token does not hold the key (`N`).
   * @throws {LockUnavailableError} No connection could carry the request.
   * @throws {LockRejectedError} The server refused it (e.g. above its `--max-lease`).
   * @throws {TypeError} For an invalid key, token or lease (nothing is sent).
   *
   * @example Keep a detached lock for another minute
   * ```ts
   * import { LockClient } from "@lockd/client";
   * const client = new LockClient("127.0.0.1:7321");
   * console.log(await client.extend("orders:17", 1042n, 60)); // true or false
   * await client.close();
   * ```
   */
  extend(key, token, lease) {
    return this.#call(() => {
      checkGrant(key, token);
      return extend(this.#requests, key, token, toMs(lease, "lease"));
    });
  }
  /**
   * Releases every held lock (one attempt each, at most about a second in all), then closes
   * every connection and timer. Requests still outstanding reject with a
   * {@linkcode LockError}, and a grant that arrives meanwhile is released (one made as it
   * closes too: docs/client.md, "Held locks"). Calling it again returns the same promise.
   * Never rejects.
   *
   * @example Close when the page goes away
   * ```ts
   * import { LockClient } from "@lockd/client";
   * const client = new LockClient("wss://locks.example.com/");
   * globalThis.addEventListener("pagehide", () => client.close());
   * ```
   */
  close() {
    this.#closed ??= this.#close();
    return this.#closed;
  }
  /** Same as {@linkcode close}, for `await using`. */
  [Symbol.asyncDispose]() {
    return this.close();
  }
  async #close() {
    this.#gate.hold();
    const held = [
      ...this.#locks
    ];
    const releases = held.map((lock) => lock.release().catch(() => {
    }));
    const timeout = new AbortController();
    await Promise.race([
      Promise.all(releases),
      sleep(1e3, timeout.signal)
    ]);
    timeout.abort();
    for (const lock of held) lock.stop();
    await this.#router.quiesce();
    this.#closing.abort(new LockError("The client is closed"));
    await this.#gate.idle();
    this.#gate.open();
    await Promise.allSettled([
      ...this.#background
    ]);
  }
  /**
   * A connection dropped. With no connection left at all, every held lock is suspected
   * lost: a single node that restarts comes back empty, and nothing can renew a lease
   * meanwhile. (Losing one node of a cluster is not a loss: a standby keeps the locks.)
   * A bridge releases what a client holds once its last WebSocket closes, so losing every
   * bridge connection is enough.
   */
  #connectionLost() {
    if (this.#closing.signal.aborted) return;
    const connections = this.#router.connections;
    const bridged = connections.filter((c) => c.address.url !== void 0);
    let why;
    if (!connections.some((c) => c.up)) why = "every connection to lockd dropped";
    else if (bridged.length > 0 && !bridged.some((c) => c.up)) {
      why = "every connection to the bridge dropped, and the bridge releases its locks";
    } else return;
    for (const lock of this.#locks) lock.lose(why, false);
  }
  /** Runs `fn` unless the client is closed; what it throws becomes a rejection. */
  #call(fn) {
    if (this.#closed !== void 0) return Promise.reject(new LockError("The client is closed"));
    try {
      return this.#gate.settle(fn());
    } catch (error) {
      return Promise.reject(error);
    }
  }
  /** Keeps a background promise from being unhandled and lets close() wait for it. */
  #track(promise) {
    const tracked = promise.catch(() => {
    }).finally(() => this.#background.delete(tracked));
    this.#background.add(tracked);
  }
};
export {
  DEFAULT_PORT,
  LockAbortedError,
  LockClient,
  LockError,
  LockLostError,
  LockRejectedError,
  LockTimeoutError,
  LockUnavailableError,
  connectTransport,
  parseAddress
};
