/*
 * lockd benchmark load generator: one thread, epoll, non-blocking sockets, so that it costs
 * little CPU per request on a machine whose cores it shares with the server under test.
 *
 * It speaks two protocols with the same request pattern:
 *   lockd  the line protocol of SPEC §2: "A <key> <lease> <wait>" then "R <key> <token>";
 *   redis  the Redlock recipe in RESP: "SET <key> <token> NX PX <ms>" to acquire, and a
 *          compare-and-delete Lua script (loaded once with SCRIPT LOAD) run with EVALSHA
 *          to release.
 *
 * Modes (bench/main.ts drives them; every mode prints one JSON line at the end):
 *   pairs    uncontended acquire+release pairs on distinct keys, --conns x --depth in flight
 *   contend  --conns clients on one key; lockd queues them, Redis clients retry SET NX
 *   fill     hold --count locks on distinct keys (memory, idle CPU); with --samples, also
 *            measure how late sampled leases expire amid the fill's mass expiry
 *   waiters  lockd only: --count holders, then --conns connections queue behind each of them
 *   probe    lockd cluster only: a steady stream of acquire+release, a signal to the active
 *            node, and the time until the next grant on the other node
 *
 * Between phases, `fill --handshake` and `waiters` print a word on stdout ("baseline",
 * "filled", "queued") and wait for a line (or EOF) on stdin, so that the driver can measure
 * the server at a known point.
 *
 * Build: cc -O2 -o loadgen loadgen.c
 */
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <arpa/inet.h>
#include <signal.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/epoll.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>
#include <math.h>

/* ---------------------------------------------------------------- utilities */

static uint64_t g_now; /* CLOCK_MONOTONIC, ns; refreshed after every wait and read */

static uint64_t now_ns(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
}

static void die(const char *fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  fprintf(stderr, "loadgen: ");
  vfprintf(stderr, fmt, ap);
  fprintf(stderr, "\n");
  va_end(ap);
  exit(2);
}

static void *xrealloc(void *p, size_t n) {
  void *q = realloc(p, n ? n : 1);
  if (!q) die("out of memory");
  return q;
}

static uint64_t splitmix64(uint64_t *state) {
  uint64_t z = (*state += 0x9e3779b97f4a7c15ull);
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
  return z ^ (z >> 31);
}

/* Latency samples in ns (uint32: up to 4.29 s, larger values are clamped). */
typedef struct {
  uint32_t *v;
  size_t n, cap;
} samples_t;

static void sample_add(samples_t *s, uint64_t ns) {
  if (s->n == s->cap) {
    s->cap = s->cap ? s->cap * 2 : 65536;
    s->v = xrealloc(s->v, s->cap * sizeof *s->v);
  }
  s->v[s->n++] = ns > UINT32_MAX ? UINT32_MAX : (uint32_t)ns;
}

static int cmp_u32(const void *a, const void *b) {
  uint32_t x = *(const uint32_t *)a, y = *(const uint32_t *)b;
  return x < y ? -1 : x > y;
}

/* Quantile q of sorted samples, in microseconds (nearest rank). */
static double quantile_us(const samples_t *s, double q) {
  if (s->n == 0) return -1;
  size_t i = (size_t)ceil(q * (double)s->n);
  if (i > 0) i--;
  if (i >= s->n) i = s->n - 1;
  return s->v[i] / 1000.0;
}

/* ---------------------------------------------------------------- options */

enum proto { LOCKD, REDIS };

static struct {
  const char *mode;
  enum proto proto;
  int port, port_b;
  int conns, depth;
  double warmup_s, duration_s;
  long count;
  long lease_ms;
  long samples, settle_ms;
  int handshake;
  long retry_us;
  int pid, signal;
  double before_s, timeout_s;
  const char *prefix;
} opt = {
    .mode = "pairs",
    .proto = LOCKD,
    .conns = 1,
    .depth = 1,
    .warmup_s = 1,
    .duration_s = 3,
    .count = 1000000,
    .lease_ms = 30000,
    .samples = 0,
    .settle_ms = 200,
    .retry_us = 0,
    .signal = SIGKILL,
    .before_s = 0.3,
    .timeout_s = 10,
    .prefix = "bench:",
};

static void parse_args(int argc, char **argv) {
  if (argc < 2) die("usage: loadgen MODE --proto lockd|redis --port N [options]");
  opt.mode = argv[1];
  for (int i = 2; i < argc; i++) {
    const char *a = argv[i];
    if (!strcmp(a, "--handshake")) {
      opt.handshake = 1;
      continue;
    }
    if (i + 1 >= argc) die("%s needs a value", a);
    const char *v = argv[++i];
    if (!strcmp(a, "--proto")) opt.proto = !strcmp(v, "redis") ? REDIS : LOCKD;
    else if (!strcmp(a, "--port")) opt.port = atoi(v);
    else if (!strcmp(a, "--port-b")) opt.port_b = atoi(v);
    else if (!strcmp(a, "--conns")) opt.conns = atoi(v);
    else if (!strcmp(a, "--depth")) opt.depth = atoi(v);
    else if (!strcmp(a, "--warmup")) opt.warmup_s = atof(v);
    else if (!strcmp(a, "--duration")) opt.duration_s = atof(v);
    else if (!strcmp(a, "--count")) opt.count = atol(v);
    else if (!strcmp(a, "--lease-ms")) opt.lease_ms = atol(v);
    else if (!strcmp(a, "--samples")) opt.samples = atol(v);
    else if (!strcmp(a, "--settle-ms")) opt.settle_ms = atol(v);
    else if (!strcmp(a, "--retry-us")) opt.retry_us = atol(v);
    else if (!strcmp(a, "--pid")) opt.pid = atoi(v);
    else if (!strcmp(a, "--signal")) opt.signal = atoi(v);
    else if (!strcmp(a, "--before")) opt.before_s = atof(v);
    else if (!strcmp(a, "--timeout")) opt.timeout_s = atof(v);
    else if (!strcmp(a, "--prefix")) opt.prefix = v;
    else die("unknown option %s", a);
  }
  if (opt.port <= 0) die("--port is required");
  if (opt.conns < 1 || opt.depth < 1) die("--conns and --depth must be at least 1");
}

/* ---------------------------------------------------------------- errors */

static long g_errors;     /* unexpected replies */
static long g_closed;     /* connections closed by the server */
static char g_err_samples[5][160];
static int g_err_nsamples;

static void note_error(const char *what, const char *text, size_t len) {
  g_errors++;
  if (g_err_nsamples < 5) {
    if (len > 100) len = 100;
    snprintf(g_err_samples[g_err_nsamples++], sizeof g_err_samples[0], "%s: %.*s", what,
             (int)len, text);
  }
}

/* ---------------------------------------------------------------- connections */

enum status { S_GRANT, S_TIMEOUT, S_RELEASED, S_NOTHELD, S_REDIRECT, S_ERROR, S_NIL, S_OTHER };
enum kind { K_ACQ = 1, K_REL = 2, K_LOAD = 3 };

typedef struct {
  enum status status;
  enum kind kind;   /* what the reply answers */
  long id;          /* slot id: from the key (lockd) or the request queue (Redis) */
  const char *val;  /* token of a lockd grant, address of M, message of E */
  size_t vlen;
  const char *raw;  /* the whole reply, for error messages */
  size_t rawlen;
} reply_t;

typedef struct conn conn_t;
struct conn {
  int fd, idx, closed, want_out, dirty;
  char *rbuf;
  size_t rlen, rcap;
  char *wbuf;
  size_t wlen, wcap;
  /* Redis answers in request order: (id, kind) of every request not answered yet. */
  long *fifo;
  size_t fhead, flen, fcap;
  long pending; /* requests not answered yet */
  uint64_t retry_at; /* 0 or when to send again (mode-specific) */
};

static int g_ep;
static int g_timeout_ms = 10; /* longest sleep of the event loop (timers are checked after it) */
static conn_t **g_conns;
static int g_nconns;
static conn_t **g_dirty;
static int g_ndirty;
static char g_sha[41]; /* SHA1 of the release script (Redis) */
static uint64_t g_token_state = 0x1234567;

static void (*on_reply)(conn_t *c, reply_t *r);
static void (*on_closed)(conn_t *c);

static const char RELEASE_SCRIPT[] =
    "if redis.call('get', KEYS[1]) == ARGV[1] then return redis.call('del', KEYS[1]) "
    "else return 0 end";

static int connect_to(int port) {
  int fd = socket(AF_INET, SOCK_STREAM, 0);
  if (fd < 0) die("socket: %s", strerror(errno));
  struct sockaddr_in sa = {.sin_family = AF_INET, .sin_port = htons((uint16_t)port)};
  sa.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  if (connect(fd, (struct sockaddr *)&sa, sizeof sa) < 0)
    die("connect to 127.0.0.1:%d: %s", port, strerror(errno));
  int one = 1;
  setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
  return fd;
}

/* Blocking request/reply on a fresh socket, before the event loop: SCRIPT LOAD. */
static void redis_script_load(int port) {
  int fd = connect_to(port);
  char req[512];
  int n = snprintf(req, sizeof req, "*3\r\n$6\r\nSCRIPT\r\n$4\r\nLOAD\r\n$%zu\r\n%s\r\n",
                   strlen(RELEASE_SCRIPT), RELEASE_SCRIPT);
  if (write(fd, req, (size_t)n) != n) die("SCRIPT LOAD: write failed");
  char buf[256];
  size_t len = 0;
  while (len < sizeof buf - 1) {
    ssize_t r = read(fd, buf + len, sizeof buf - 1 - len);
    if (r <= 0) die("SCRIPT LOAD: no reply");
    len += (size_t)r;
    buf[len] = 0;
    char *body = strstr(buf, "\r\n");
    if (buf[0] == '$' && body && strlen(body + 2) >= 42) {
      memcpy(g_sha, body + 2, 40);
      g_sha[40] = 0;
      close(fd);
      return;
    }
    if (buf[0] == '-') die("SCRIPT LOAD: %s", buf);
  }
  die("SCRIPT LOAD: unexpected reply");
}

static conn_t *conn_open(int port) {
  conn_t *c = calloc(1, sizeof *c);
  if (!c) die("out of memory");
  c->fd = connect_to(port);
  fcntl(c->fd, F_SETFL, fcntl(c->fd, F_GETFL) | O_NONBLOCK);
  c->rcap = 256 * 1024;
  c->rbuf = xrealloc(NULL, c->rcap);
  c->idx = g_nconns;
  g_conns = xrealloc(g_conns, sizeof *g_conns * (size_t)(g_nconns + 1));
  g_dirty = xrealloc(g_dirty, sizeof *g_dirty * (size_t)(g_nconns + 1));
  g_conns[g_nconns++] = c;
  struct epoll_event ev = {.events = EPOLLIN, .data.ptr = c};
  if (epoll_ctl(g_ep, EPOLL_CTL_ADD, c->fd, &ev) < 0) die("epoll_ctl: %s", strerror(errno));
  return c;
}

static void conn_close(conn_t *c) {
  if (c->closed) return;
  c->closed = 1;
  epoll_ctl(g_ep, EPOLL_CTL_DEL, c->fd, NULL);
  close(c->fd);
  if (on_closed) on_closed(c);
}

static void out_reserve(conn_t *c, size_t n) {
  if (c->wlen + n > c->wcap) {
    while (c->wlen + n > c->wcap) c->wcap = c->wcap ? c->wcap * 2 : 64 * 1024;
    c->wbuf = xrealloc(c->wbuf, c->wcap);
  }
  if (!c->dirty) {
    c->dirty = 1;
    g_dirty[g_ndirty++] = c;
  }
}

static void out_printf(conn_t *c, const char *fmt, ...) {
  va_list ap;
  out_reserve(c, 600);
  va_start(ap, fmt);
  int n = vsnprintf(c->wbuf + c->wlen, c->wcap - c->wlen, fmt, ap);
  va_end(ap);
  if (n < 0 || (size_t)n >= c->wcap - c->wlen) die("request too long");
  c->wlen += (size_t)n;
}

static void fifo_push(conn_t *c, long id, enum kind kind) {
  if (c->flen == c->fcap) {
    size_t ncap = c->fcap ? c->fcap * 2 : 256;
    long *n = xrealloc(NULL, ncap * sizeof *n);
    for (size_t i = 0; i < c->flen; i++) n[i] = c->fifo[(c->fhead + i) % c->fcap];
    free(c->fifo);
    c->fifo = n;
    c->fcap = ncap;
    c->fhead = 0;
  }
  c->fifo[(c->fhead + c->flen++) % c->fcap] = id * 4 + kind;
}

/* Writes what is queued; the rest waits for EPOLLOUT. */
static void conn_flush(conn_t *c) {
  size_t off = 0;
  while (!c->closed && off < c->wlen) {
    ssize_t n = write(c->fd, c->wbuf + off, c->wlen - off);
    if (n > 0) off += (size_t)n;
    else if (n < 0 && errno == EINTR) continue;
    else if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) break;
    else {
      g_closed++;
      conn_close(c);
      return;
    }
  }
  if (c->closed) return;
  memmove(c->wbuf, c->wbuf + off, c->wlen - off);
  c->wlen -= off;
  int want = c->wlen > 0;
  if (want != c->want_out) {
    c->want_out = want;
    struct epoll_event ev = {.events = EPOLLIN | (want ? EPOLLOUT : 0), .data.ptr = c};
    epoll_ctl(g_ep, EPOLL_CTL_MOD, c->fd, &ev);
  }
}

static void flush_dirty(void) {
  for (int i = 0; i < g_ndirty; i++) {
    g_dirty[i]->dirty = 0;
    conn_flush(g_dirty[i]);
  }
  g_ndirty = 0;
}

/* ---------------------------------------------------------------- requests */

typedef struct {
  char key[64];
  unsigned char klen;
  char token[24];
  unsigned char toklen;
} keytok_t;

static void make_key(keytok_t *k, const char *prefix, long id) {
  int n = snprintf(k->key, sizeof k->key, "%s%ld", prefix, id);
  k->klen = (unsigned char)n;
}

/* Acquire `k` for lease_ms, queueing at most wait_s (lockd); Redis gets a fresh token. */
static void send_acquire(conn_t *c, long id, keytok_t *k, long lease_ms, const char *wait_s,
                         enum kind kind) {
  c->pending++;
  if (opt.proto == LOCKD) {
    if (lease_ms % 1000 == 0) out_printf(c, "A %.*s %ld %s\n", k->klen, k->key, lease_ms / 1000, wait_s);
    else out_printf(c, "A %.*s %ld.%03ld %s\n", k->klen, k->key, lease_ms / 1000, lease_ms % 1000, wait_s);
    return;
  }
  k->toklen = 16;
  snprintf(k->token, sizeof k->token, "%016llx",
           (unsigned long long)splitmix64(&g_token_state));
  char ms[24];
  int mslen = snprintf(ms, sizeof ms, "%ld", lease_ms);
  out_printf(c, "*6\r\n$3\r\nSET\r\n$%d\r\n%.*s\r\n$16\r\n%s\r\n$2\r\nNX\r\n$2\r\nPX\r\n$%d\r\n%s\r\n",
             k->klen, k->klen, k->key, k->token, mslen, ms);
  fifo_push(c, id, kind);
}

static void send_release(conn_t *c, long id, keytok_t *k) {
  c->pending++;
  if (opt.proto == LOCKD) {
    out_printf(c, "R %.*s %.*s\n", k->klen, k->key, k->toklen, k->token);
    return;
  }
  out_printf(c, "*5\r\n$7\r\nEVALSHA\r\n$40\r\n%s\r\n$1\r\n1\r\n$%d\r\n%.*s\r\n$%d\r\n%.*s\r\n",
             g_sha, k->klen, k->klen, k->key, k->toklen, k->toklen, k->token);
  fifo_push(c, id, K_REL);
}

/* ---------------------------------------------------------------- reply parsing */

/* The number after the last ':' of a key, or -1. */
static long key_id(const char *key, size_t len) {
  long v = 0;
  size_t i = len;
  while (i > 0 && key[i - 1] >= '0' && key[i - 1] <= '9') i--;
  if (i == len) return -1;
  for (size_t j = i; j < len; j++) v = v * 10 + (key[j] - '0');
  return v;
}

/* lockd: "<op> <key> <status> [<value>]" */
static void parse_lockd_line(conn_t *c, const char *p, size_t len) {
  if (len > 0 && p[len - 1] == '\r') len--;
  if (len == 0) return;
  reply_t r = {.raw = p, .rawlen = len, .id = -1};
  const char *end = p + len;
  const char *sp1 = memchr(p, ' ', len);
  const char *sp2 = sp1 ? memchr(sp1 + 1, ' ', (size_t)(end - sp1 - 1)) : NULL;
  if (!sp2 || sp2 + 1 >= end) {
    r.status = S_OTHER;
    c->pending--;
    on_reply(c, &r);
    return;
  }
  r.kind = p[0] == 'A' ? K_ACQ : p[0] == 'R' ? K_REL : 0;
  r.id = key_id(sp1 + 1, (size_t)(sp2 - sp1 - 1));
  char st = sp2[1];
  r.val = sp2 + 2 < end ? sp2 + 3 : end;
  r.vlen = (size_t)(end - r.val);
  switch (st) {
    case 'A': r.status = S_GRANT; break;
    case 'T': r.status = S_TIMEOUT; break;
    case 'R': r.status = S_RELEASED; break;
    case 'N': r.status = S_NOTHELD; break;
    case 'M': r.status = S_REDIRECT; break;
    case 'E': r.status = S_ERROR; break;
    default: r.status = S_OTHER;
  }
  c->pending--;
  on_reply(c, &r);
}

/* Parses complete RESP replies at the start of rbuf; returns bytes consumed. */
static size_t parse_redis(conn_t *c) {
  size_t pos = 0;
  while (pos < c->rlen) {
    char *p = c->rbuf + pos;
    size_t avail = c->rlen - pos;
    char *nl = memchr(p, '\n', avail);
    if (!nl) break;
    size_t hdr = (size_t)(nl - p) + 1;
    reply_t r = {.raw = p, .rawlen = hdr > 2 ? hdr - 2 : 0};
    size_t used = hdr;
    switch (p[0]) {
      case '+': r.status = S_GRANT; break; /* +OK of SET NX */
      case '-': r.status = S_ERROR; break;
      case ':': r.status = p[1] == '1' ? S_RELEASED : S_NOTHELD; break;
      case '$': {
        long blen = strtol(p + 1, NULL, 10);
        if (blen < 0) {
          r.status = S_NIL; /* SET NX found the key held */
          break;
        }
        if (avail < hdr + (size_t)blen + 2) return pos;
        r.status = S_OTHER;
        used = hdr + (size_t)blen + 2;
        break;
      }
      default: r.status = S_OTHER;
    }
    if (c->flen == 0) {
      note_error("reply to nothing", r.raw, r.rawlen);
    } else {
      long tag = c->fifo[c->fhead];
      c->fhead = (c->fhead + 1) % c->fcap;
      c->flen--;
      r.id = tag / 4;
      r.kind = (enum kind)(tag % 4);
      c->pending--;
      on_reply(c, &r);
    }
    pos += used;
  }
  return pos;
}

static void conn_read(conn_t *c) {
  for (;;) {
    if (c->closed) return;
    if (c->rlen == c->rcap) {
      c->rcap *= 2;
      c->rbuf = xrealloc(c->rbuf, c->rcap);
    }
    ssize_t n = read(c->fd, c->rbuf + c->rlen, c->rcap - c->rlen);
    if (n < 0 && errno == EINTR) continue;
    if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) return;
    if (n <= 0) {
      g_closed++;
      conn_close(c);
      return;
    }
    g_now = now_ns();
    c->rlen += (size_t)n;
    size_t used = 0;
    if (opt.proto == LOCKD) {
      char *p = c->rbuf, *end = c->rbuf + c->rlen, *nl;
      while ((nl = memchr(p, '\n', (size_t)(end - p)))) {
        parse_lockd_line(c, p, (size_t)(nl - p));
        if (c->closed) return;
        p = nl + 1;
      }
      used = (size_t)(p - c->rbuf);
    } else {
      used = parse_redis(c);
    }
    memmove(c->rbuf, c->rbuf + used, c->rlen - used);
    c->rlen -= used;
    if (c->rlen < c->rcap) return; /* drained (level-triggered: no need to spin) */
  }
}

/* Runs the event loop until done() says so; tick() may send; timeout_ms() bounds the wait. */
static void run_loop(int (*done)(void), void (*tick)(void)) {
  struct epoll_event evs[256];
  for (;;) {
    g_now = now_ns();
    if (tick) tick();
    flush_dirty();
    if (done()) return;
    int n = epoll_wait(g_ep, evs, 256, g_timeout_ms);
    if (n < 0 && errno != EINTR) die("epoll_wait: %s", strerror(errno));
    g_now = now_ns();
    for (int i = 0; i < n; i++) {
      conn_t *c = evs[i].data.ptr;
      if (c->closed) continue;
      if (evs[i].events & EPOLLOUT) conn_flush(c);
      if (evs[i].events & (EPOLLIN | EPOLLERR | EPOLLHUP)) conn_read(c);
    }
    flush_dirty();
  }
}

static void wait_stdin_line(void) {
  char line[64];
  if (!fgets(line, sizeof line, stdin)) return;
}

static void wait_stdin_eof(void) {
  char line[64];
  while (fgets(line, sizeof line, stdin)) {
  }
}

static void say(const char *word) {
  printf("%s\n", word);
  fflush(stdout);
}

static void print_errors_json(void) {
  printf("\"errors\":%ld,\"closed\":%ld,\"error_samples\":[", g_errors, g_closed);
  for (int i = 0; i < g_err_nsamples; i++) {
    printf("%s\"", i ? "," : "");
    for (const char *s = g_err_samples[i]; *s; s++) {
      if (*s == '"' || *s == '\\') putchar('\\');
      putchar(*s >= 32 ? *s : '?');
    }
    putchar('"');
  }
  printf("]");
}

/* ---------------------------------------------------------------- mode: pairs */

typedef struct {
  keytok_t k;
  uint64_t t0;
  int busy;
} slot_t;

static slot_t *g_slots;
static long g_nslots;
static uint64_t g_t_warm, g_t_end, g_t_deadline;
static long g_done_pairs, g_outstanding;
static samples_t g_lat;

static void pairs_start(conn_t *c, long id) {
  slot_t *s = &g_slots[id];
  s->t0 = g_now;
  s->busy = 1;
  send_acquire(c, id, &s->k, 30000, "5", K_ACQ);
}

static void pairs_reply(conn_t *c, reply_t *r) {
  if (r->id < 0 || r->id >= g_nslots || !g_slots[r->id].busy) {
    note_error("reply for no request", r->raw, r->rawlen);
    return;
  }
  slot_t *s = &g_slots[r->id];
  if (r->kind == K_ACQ && r->status == S_GRANT) {
    if (opt.proto == LOCKD) {
      if (r->vlen >= sizeof s->k.token) r->vlen = sizeof s->k.token - 1;
      memcpy(s->k.token, r->val, r->vlen);
      s->k.toklen = (unsigned char)r->vlen;
    }
    send_release(c, r->id, &s->k);
    return;
  }
  if (r->kind == K_REL && r->status == S_RELEASED) {
    if (g_now >= g_t_warm && g_now < g_t_end) {
      g_done_pairs++;
      sample_add(&g_lat, g_now - s->t0);
    }
  } else {
    note_error(r->kind == K_ACQ ? "acquire" : "release", r->raw, r->rawlen);
  }
  if (g_now < g_t_end) pairs_start(c, r->id);
  else {
    s->busy = 0;
    g_outstanding--;
  }
}

static void pairs_closed(conn_t *c) {
  for (long id = (long)c->idx * opt.depth; id < (long)(c->idx + 1) * opt.depth; id++) {
    if (g_slots[id].busy) {
      g_slots[id].busy = 0;
      g_outstanding--;
    }
  }
}

static int pairs_done(void) {
  return (g_now >= g_t_end && g_outstanding == 0) || g_now >= g_t_deadline;
}

static void mode_pairs(void) {
  g_nslots = (long)opt.conns * opt.depth;
  g_slots = calloc((size_t)g_nslots, sizeof *g_slots);
  on_reply = pairs_reply;
  on_closed = pairs_closed;
  for (int i = 0; i < opt.conns; i++) conn_open(opt.port);
  g_now = now_ns();
  g_t_warm = g_now + (uint64_t)(opt.warmup_s * 1e9);
  g_t_end = g_t_warm + (uint64_t)(opt.duration_s * 1e9);
  g_t_deadline = g_t_end + 10000000000ull;
  for (long id = 0; id < g_nslots; id++) {
    make_key(&g_slots[id].k, opt.prefix, id);
    pairs_start(g_conns[id / opt.depth], id);
  }
  g_outstanding = g_nslots;
  run_loop(pairs_done, NULL);
  qsort(g_lat.v, g_lat.n, sizeof *g_lat.v, cmp_u32);
  printf("{\"mode\":\"pairs\",\"proto\":\"%s\",\"conns\":%d,\"depth\":%d,\"duration_s\":%.3f,"
         "\"pairs\":%ld,\"pairs_per_s\":%.1f,\"p50_us\":%.1f,\"p99_us\":%.1f,\"p999_us\":%.1f,"
         "\"max_us\":%.1f,\"lost\":%ld,",
         opt.proto == LOCKD ? "lockd" : "redis", opt.conns, opt.depth, opt.duration_s,
         g_done_pairs, g_done_pairs / opt.duration_s, quantile_us(&g_lat, 0.5),
         quantile_us(&g_lat, 0.99), quantile_us(&g_lat, 0.999), quantile_us(&g_lat, 1.0),
         g_outstanding);
  print_errors_json();
  printf("}\n");
}

/* ---------------------------------------------------------------- mode: contend */

/* One slot per client, on one key. lockd: the acquire queues (wait up to 10 s). Redis: a
 * nil reply to SET NX is retried after --retry-us (0 = at once), as a Redlock client loops. */

static long *g_grants;
static long g_attempts, g_timeouts;
static keytok_t g_hot;
static keytok_t *g_client_tok;

static void contend_send(conn_t *c) {
  send_acquire(c, c->idx, &g_client_tok[c->idx], 30000, "10", K_ACQ);
  g_attempts++;
}

static void contend_next(conn_t *c) {
  if (g_now < g_t_end) {
    g_slots[c->idx].t0 = g_now;
    contend_send(c);
  } else {
    g_slots[c->idx].busy = 0;
    g_outstanding--;
  }
}

static void contend_reply(conn_t *c, reply_t *r) {
  slot_t *s = &g_slots[c->idx];
  keytok_t *k = &g_client_tok[c->idx];
  if (r->kind == K_ACQ && r->status == S_GRANT) {
    if (g_now >= g_t_warm && g_now < g_t_end) {
      g_grants[c->idx]++;
      sample_add(&g_lat, g_now - s->t0);
    }
    if (opt.proto == LOCKD) {
      if (r->vlen >= sizeof k->token) r->vlen = sizeof k->token - 1;
      memcpy(k->token, r->val, r->vlen);
      k->toklen = (unsigned char)r->vlen;
    }
    send_release(c, c->idx, k);
    return;
  }
  if (r->kind == K_ACQ && (r->status == S_NIL || r->status == S_TIMEOUT)) {
    if (r->status == S_TIMEOUT) g_timeouts++;
    if (g_now >= g_t_end) {
      s->busy = 0;
      g_outstanding--;
    } else if (opt.retry_us > 0) {
      c->retry_at = g_now + (uint64_t)opt.retry_us * 1000;
    } else {
      contend_send(c);
    }
    return;
  }
  if (r->kind == K_REL && r->status == S_RELEASED) {
    contend_next(c);
    return;
  }
  note_error(r->kind == K_ACQ ? "acquire" : "release", r->raw, r->rawlen);
  contend_next(c);
}

static void contend_tick(void) {
  for (int i = 0; i < g_nconns; i++) {
    conn_t *c = g_conns[i];
    if (c->retry_at && g_now >= c->retry_at) {
      c->retry_at = 0;
      if (g_now < g_t_end) contend_send(c);
      else {
        g_slots[i].busy = 0;
        g_outstanding--;
      }
    }
  }
}

static void mode_contend(void) {
  g_nslots = opt.conns;
  g_slots = calloc((size_t)g_nslots, sizeof *g_slots);
  g_grants = calloc((size_t)g_nslots, sizeof *g_grants);
  g_client_tok = calloc((size_t)g_nslots, sizeof *g_client_tok);
  on_reply = contend_reply;
  on_closed = pairs_closed;
  if (opt.retry_us > 0) g_timeout_ms = 1;
  opt.depth = 1;
  snprintf(g_hot.key, sizeof g_hot.key, "%shot", opt.prefix);
  g_hot.klen = (unsigned char)strlen(g_hot.key);
  for (int i = 0; i < opt.conns; i++) {
    conn_open(opt.port);
    g_client_tok[i] = g_hot;
  }
  g_now = now_ns();
  g_t_warm = g_now + (uint64_t)(opt.warmup_s * 1e9);
  g_t_end = g_t_warm + (uint64_t)(opt.duration_s * 1e9);
  g_t_deadline = g_t_end + 15000000000ull;
  for (int i = 0; i < opt.conns; i++) {
    g_slots[i].busy = 1;
    g_slots[i].t0 = g_now;
    contend_send(g_conns[i]);
  }
  g_outstanding = g_nslots;
  run_loop(pairs_done, contend_tick);
  qsort(g_lat.v, g_lat.n, sizeof *g_lat.v, cmp_u32);
  long total = 0, mn = -1, mx = 0;
  for (int i = 0; i < opt.conns; i++) {
    total += g_grants[i];
    if (mn < 0 || g_grants[i] < mn) mn = g_grants[i];
    if (g_grants[i] > mx) mx = g_grants[i];
  }
  double mean = (double)total / opt.conns, var = 0;
  for (int i = 0; i < opt.conns; i++) var += pow((double)g_grants[i] - mean, 2);
  double cov = mean > 0 ? sqrt(var / opt.conns) / mean : 0;
  printf("{\"mode\":\"contend\",\"proto\":\"%s\",\"clients\":%d,\"duration_s\":%.3f,"
         "\"grants\":%ld,\"handoffs_per_s\":%.1f,\"wait_p50_us\":%.1f,\"wait_p99_us\":%.1f,"
         "\"wait_max_us\":%.1f,\"grants_min\":%ld,\"grants_max\":%ld,\"grants_cov\":%.4f,"
         "\"attempts\":%ld,\"timeouts\":%ld,\"retry_us\":%ld,\"lost\":%ld,",
         opt.proto == LOCKD ? "lockd" : "redis", opt.conns, opt.duration_s, total,
         total / opt.duration_s, quantile_us(&g_lat, 0.5), quantile_us(&g_lat, 0.99),
         quantile_us(&g_lat, 1.0), mn, mx, cov, g_attempts, g_timeouts, opt.retry_us,
         g_outstanding);
  print_errors_json();
  printf("}\n");
}

/* ---------------------------------------------------------------- mode: fill */

/* Holds --count locks on keys <prefix>0 .. <prefix>N-1 (--depth in flight per connection).
 *
 * With --samples S (lockd), the fill takes N - S of them, and S sampled leases measure how
 * late leases expire while the fill's leases expire en masse. They are taken after the
 * fill, once the server is idle (--settle-ms later), one request at a time on a connection
 * of their own, so that each holder's grant time on the server is known within an idle
 * round trip (tens of µs), on keys <prefix>sample:<i>. Sample i gets the lease that makes it
 * expire together with the fill's lease of rank (i + 1/2) (N - S) / S (the reply time of that
 * fill grant plus --lease-ms), so the samples are spread over the mass expiry as densely as
 * the fill's leases. As soon as
 * a holder is granted, a waiter queues behind it on another connection. Lateness is the
 * waiter's grant time minus the holder's grant time and the holder's lease: bounded below by
 * timing from the holder's reply and above by timing from its request. */

static long g_fill_count, g_next_id, g_granted;
static long g_nsamples, g_holders_granted, g_waiters_granted, g_sample_next;
static uint64_t *g_fill_mark; /* reply time of the fill grant of each sample's rank */
static long g_mark_next;
static uint64_t *g_hold_sent, *g_hold_got;
static long *g_hold_lease_ms;
static samples_t g_late, g_late_sent, g_sample_rtt;
static conn_t *g_waiter_conn, *g_sample_conn;
static int g_fill_phase; /* 1 = filling, 2 = taking the samples, 3 = waiting for expiries */

/* The fill grant whose reply time sample i's lease is aimed at (0-based, among the grants). */
static long mark_rank(long i) {
  return (long)(((2 * i + 1) * (double)g_fill_count) / (2.0 * (double)g_nsamples));
}

static void make_sample_key(keytok_t *k, long i) {
  int n = snprintf(k->key, sizeof k->key, "%ssample:%ld", opt.prefix, i);
  k->klen = (unsigned char)n;
}

/* Takes the next sampled lease, ending together with its rank's fill lease. */
static void sample_send(void) {
  if (g_sample_next >= g_nsamples) return;
  long i = g_sample_next++;
  keytok_t k;
  make_sample_key(&k, i);
  g_now = now_ns();
  double left_ms = ((double)g_fill_mark[i] + opt.lease_ms * 1e6 - (double)g_now) / 1e6;
  long lease_ms = lround(left_ms);
  if (lease_ms < 1) die("the fill took longer than the lease: use a longer lease");
  g_hold_lease_ms[i] = lease_ms;
  g_hold_sent[i] = g_now;
  send_acquire(g_sample_conn, i, &k, lease_ms, "1", K_LOAD);
}

static void fill_send(conn_t *c) {
  if (g_next_id >= g_fill_count) return;
  long id = g_next_id++;
  keytok_t k;
  make_key(&k, opt.prefix, id);
  send_acquire(c, id, &k, opt.lease_ms, "1", K_LOAD);
}

static void fill_reply(conn_t *c, reply_t *r) {
  if (c == g_waiter_conn) {
    if (r->status != S_GRANT || r->id < 0 || r->id >= g_nsamples || !g_hold_got[r->id]) {
      note_error("waiter", r->raw, r->rawlen);
      return;
    }
    long i = r->id;
    double lease_ns = g_hold_lease_ms[i] * 1e6;
    double late = (double)g_now - (double)g_hold_got[i] - lease_ns;
    double late_sent = (double)g_now - (double)g_hold_sent[i] - lease_ns;
    sample_add(&g_late, late < 0 ? 0 : (uint64_t)late);
    sample_add(&g_late_sent, late_sent < 0 ? 0 : (uint64_t)late_sent);
    /* Granted before the holder's request was even sent + lease: the lease ended early. */
    if (late_sent < 0) note_error("lease expired early", r->raw, r->rawlen);
    g_waiters_granted++;
    return;
  }
  if (c == g_sample_conn) {
    if (r->status != S_GRANT || r->id < 0 || r->id >= g_nsamples) {
      note_error("sampled holder", r->raw, r->rawlen);
      sample_send();
      return;
    }
    long i = r->id;
    g_hold_got[i] = g_now;
    sample_add(&g_sample_rtt, g_now - g_hold_sent[i]);
    g_holders_granted++;
    keytok_t k;
    make_sample_key(&k, i);
    char wait[32];
    snprintf(wait, sizeof wait, "%ld", g_hold_lease_ms[i] / 1000 + 120);
    send_acquire(g_waiter_conn, i, &k, 60000, wait, K_ACQ);
    sample_send();
    return;
  }
  if (r->status != S_GRANT) {
    note_error("fill", r->raw, r->rawlen);
  } else {
    while (g_mark_next < g_nsamples && mark_rank(g_mark_next) == g_granted)
      g_fill_mark[g_mark_next++] = g_now;
    g_granted++;
  }
  fill_send(c);
}

static int fill_done(void) {
  if (g_closed > 0) return 1;
  if (g_fill_phase == 1) return g_granted + g_errors >= g_fill_count;
  if (g_fill_phase == 2) return g_holders_granted + g_errors >= g_nsamples;
  return g_waiters_granted + g_errors >= g_nsamples || g_now >= g_t_deadline;
}

static void mode_fill(void) {
  on_reply = fill_reply;
  on_closed = NULL;
  g_timeout_ms = 50;
  g_fill_count = opt.count;
  if (opt.samples > 0) {
    if (opt.proto != LOCKD) die("--samples needs --proto lockd");
    if (opt.samples * 2 > opt.count) die("--samples must be at most half of --count");
    g_nsamples = opt.samples;
    g_fill_count = opt.count - g_nsamples;
    g_fill_mark = calloc((size_t)g_nsamples, sizeof *g_fill_mark);
    g_hold_sent = calloc((size_t)g_nsamples, sizeof *g_hold_sent);
    g_hold_got = calloc((size_t)g_nsamples, sizeof *g_hold_got);
    g_hold_lease_ms = calloc((size_t)g_nsamples, sizeof *g_hold_lease_ms);
  }
  for (int i = 0; i < opt.conns; i++) conn_open(opt.port);
  if (g_nsamples > 0) {
    g_sample_conn = conn_open(opt.port);
    g_waiter_conn = conn_open(opt.port);
  }
  if (opt.handshake) {
    say("baseline");
    wait_stdin_line();
  }
  g_now = now_ns();
  uint64_t t0 = g_now;
  g_fill_phase = 1;
  for (int i = 0; i < opt.conns; i++)
    for (int j = 0; j < opt.depth; j++) fill_send(g_conns[i]);
  run_loop(fill_done, NULL);
  double fill_s = (g_now - t0) / 1e9;
  double samples_s = 0;
  while (g_mark_next < g_nsamples) g_fill_mark[g_mark_next++] = g_now; /* after errors */
  if (g_nsamples > 0 && g_closed == 0) {
    /* Let the server finish the fill (replies, garbage collection) before the samples. */
    struct timespec settle = {opt.settle_ms / 1000, (opt.settle_ms % 1000) * 1000000L};
    nanosleep(&settle, NULL);
    g_fill_phase = 2;
    uint64_t s0 = now_ns();
    sample_send();
    run_loop(fill_done, NULL);
    samples_s = (g_now - s0) / 1e9;
  }
  printf("%s %.3f\n", g_nsamples > 0 ? "loaded" : "filled", fill_s);
  fflush(stdout);
  if (g_nsamples > 0) {
    g_fill_phase = 3;
    g_t_deadline = g_now + (uint64_t)opt.lease_ms * 1000000ull + 60000000000ull;
    run_loop(fill_done, NULL);
    qsort(g_late.v, g_late.n, sizeof *g_late.v, cmp_u32);
    qsort(g_late_sent.v, g_late_sent.n, sizeof *g_late_sent.v, cmp_u32);
    qsort(g_sample_rtt.v, g_sample_rtt.n, sizeof *g_sample_rtt.v, cmp_u32);
  } else if (opt.handshake) {
    wait_stdin_eof();
  }
  long lease_min = 0, lease_max = 0;
  for (long i = 0; i < g_nsamples; i++) {
    if (!g_hold_lease_ms[i]) continue;
    if (!lease_min || g_hold_lease_ms[i] < lease_min) lease_min = g_hold_lease_ms[i];
    if (g_hold_lease_ms[i] > lease_max) lease_max = g_hold_lease_ms[i];
  }
  /* Where the samples' expiries fall, in s after the first expiry of the fill (t0 + lease). */
  double first_s = g_nsamples > 0 ? ((double)g_fill_mark[0] - (double)t0) / 1e9 : 0;
  double last_s = g_nsamples > 0 ? ((double)g_fill_mark[g_nsamples - 1] - (double)t0) / 1e9 : 0;
  printf("{\"mode\":\"fill\",\"proto\":\"%s\",\"count\":%ld,\"filled\":%ld,\"granted\":%ld,"
         "\"fill_s\":%.3f,\"fill_per_s\":%.1f,\"lease_ms\":%ld,\"samples\":%ld,"
         "\"samples_held\":%ld,\"samples_granted\":%ld,\"samples_s\":%.3f,"
         "\"sample_lease_min_ms\":%ld,\"sample_lease_max_ms\":%ld,"
         "\"sample_expiry_first_s\":%.3f,\"sample_expiry_last_s\":%.3f,"
         "\"late_p50_ms\":%.3f,\"late_p99_ms\":%.3f,\"late_max_ms\":%.3f,"
         "\"late_from_send_p50_ms\":%.3f,\"late_from_send_p99_ms\":%.3f,"
         "\"late_from_send_max_ms\":%.3f,\"holder_rtt_p50_ms\":%.3f,\"holder_rtt_p99_ms\":%.3f,"
         "\"holder_rtt_max_ms\":%.3f,",
         opt.proto == LOCKD ? "lockd" : "redis", opt.count, g_fill_count, g_granted, fill_s,
         g_granted / fill_s, opt.lease_ms, g_nsamples, g_holders_granted, g_waiters_granted,
         samples_s, lease_min, lease_max, first_s, last_s,
         quantile_us(&g_late, 0.5) / 1000, quantile_us(&g_late, 0.99) / 1000,
         quantile_us(&g_late, 1.0) / 1000, quantile_us(&g_late_sent, 0.5) / 1000,
         quantile_us(&g_late_sent, 0.99) / 1000, quantile_us(&g_late_sent, 1.0) / 1000,
         quantile_us(&g_sample_rtt, 0.5) / 1000, quantile_us(&g_sample_rtt, 0.99) / 1000,
         quantile_us(&g_sample_rtt, 1.0) / 1000);
  print_errors_json();
  printf("}\n");
}

/* ---------------------------------------------------------------- mode: waiters */

/* lockd: connection 0 holds --count keys; then each of --conns connections queues one
 * acquire behind every one of them (count x conns waiters), and ends with a release of a
 * key nobody holds: its N reply proves the server has read every line before it. */

static long g_holders, g_sentinels;

static void waiters_reply(conn_t *c, reply_t *r) {
  if (c->idx == 0 && r->status == S_GRANT) g_holders++;
  else if (c->idx > 0 && r->kind == K_REL && r->status == S_NOTHELD) g_sentinels++;
  else note_error("waiters", r->raw, r->rawlen);
}

static int holders_done(void) { return g_holders + g_errors >= opt.count || g_closed > 0; }
static int sentinels_done(void) { return g_sentinels + g_errors >= opt.conns || g_closed > 0; }

static void mode_waiters(void) {
  if (opt.proto != LOCKD) die("waiters: lockd only");
  on_reply = waiters_reply;
  g_timeout_ms = 50;
  conn_t *holder = conn_open(opt.port);
  for (int i = 0; i < opt.conns; i++) conn_open(opt.port);
  keytok_t k;
  for (long id = 0; id < opt.count; id++) {
    make_key(&k, opt.prefix, id);
    send_acquire(holder, id, &k, 3600000, "1", K_ACQ);
  }
  run_loop(holders_done, NULL);
  say("baseline");
  wait_stdin_line();
  uint64_t t0 = now_ns();
  for (int i = 1; i <= opt.conns; i++) {
    for (long id = 0; id < opt.count; id++) {
      make_key(&k, opt.prefix, id);
      send_acquire(g_conns[i], id, &k, 3600000, "3600", K_ACQ);
    }
    out_printf(g_conns[i], "R %ssentinel:%d 1\n", opt.prefix, i);
    g_conns[i]->pending++;
  }
  run_loop(sentinels_done, NULL);
  double queue_s = (now_ns() - t0) / 1e9;
  say("queued");
  wait_stdin_eof();
  printf("{\"mode\":\"waiters\",\"proto\":\"lockd\",\"holders\":%ld,\"waiters\":%ld,"
         "\"queue_s\":%.3f,",
         g_holders, g_sentinels * opt.count, queue_s);
  print_errors_json();
  printf("}\n");
}

/* ---------------------------------------------------------------- mode: probe */

/* A lockd cluster of two nodes (--port: the active, --port-b: the standby). One request in
 * flight: acquire a fresh key, release it, again. After --before s of grants from the
 * active it sends --signal to --pid (the active) and keeps going: an M reply sends the next
 * attempt to the node it names (the other one), E or a closed connection means "try again
 * in 1 ms" on the other node. Reports the time from the signal to the first grant from the
 * other node, and the gap between the last grant from the old active and that one. */

static conn_t *g_node[2];
static int g_target;
static long g_seq;
static uint64_t g_t_signal, g_last_grant_old, g_first_grant_new, g_last_grant_before;
static long g_grants_old_after, g_errors_after, g_redirects;
static int g_inflight;
static keytok_t g_probe_key;

static void probe_send(void) {
  conn_t *c = g_node[g_target];
  if (c->closed) {
    g_target = 1 - g_target;
    c = g_node[g_target];
    if (c->closed) return;
  }
  make_key(&g_probe_key, opt.prefix, ++g_seq);
  send_acquire(c, g_seq, &g_probe_key, 5000, "0.5", K_ACQ);
  g_inflight = 1;
}

static uint64_t g_retry_at;

static void probe_retry_later(void) {
  g_inflight = 0;
  g_retry_at = g_now + 1000000;
}

static void probe_reply(conn_t *c, reply_t *r) {
  int from = c == g_node[0] ? 0 : 1;
  if (r->kind == K_REL) { /* released (or redirected: the key is unique, let it lapse) */
    g_inflight = 0;
    probe_send();
    return;
  }
  if (r->status == S_GRANT) {
    if (from == 0) {
      g_last_grant_old = g_now;
      if (g_t_signal) g_grants_old_after++;
      else g_last_grant_before = g_now;
    } else if (g_t_signal && !g_first_grant_new) {
      g_first_grant_new = g_now;
    }
    if (r->vlen >= sizeof g_probe_key.token) r->vlen = sizeof g_probe_key.token - 1;
    memcpy(g_probe_key.token, r->val, r->vlen);
    g_probe_key.toklen = (unsigned char)r->vlen;
    send_release(c, g_seq, &g_probe_key);
    return;
  }
  if (r->status == S_REDIRECT) {
    g_redirects++;
    g_target = 1 - from;
    if (g_node[g_target]->closed) {
      g_target = from;
      probe_retry_later();
    } else {
      g_inflight = 0;
      probe_send();
    }
    return;
  }
  if (g_t_signal) g_errors_after++;
  if (r->status != S_ERROR && r->status != S_TIMEOUT) note_error("probe", r->raw, r->rawlen);
  g_target = 1 - from;
  probe_retry_later();
}

static void probe_closed(conn_t *c) {
  int from = c == g_node[0] ? 0 : 1;
  if (from == 0 && g_t_signal) g_closed--; /* the node we stopped: expected */
  if (g_target == from && g_inflight) {
    g_target = 1 - from;
    g_inflight = 0;
    probe_send();
  }
}

static void probe_tick(void) {
  if (!g_t_signal && g_last_grant_before && g_now >= g_t_warm) {
    g_t_signal = now_ns();
    if (kill(opt.pid, opt.signal) < 0) die("kill %d: %s", opt.pid, strerror(errno));
  }
  if (g_retry_at && g_now >= g_retry_at) {
    g_retry_at = 0;
    probe_send();
  }
}

static int probe_done(void) {
  return g_first_grant_new || g_now >= g_t_deadline || (g_node[0]->closed && g_node[1]->closed);
}

static void mode_probe(void) {
  if (opt.proto != LOCKD || opt.port_b <= 0) die("probe: lockd, with --port-b");
  on_reply = probe_reply;
  on_closed = probe_closed;
  g_timeout_ms = 1;
  g_node[0] = conn_open(opt.port);
  g_node[1] = conn_open(opt.port_b);
  g_now = now_ns();
  g_t_warm = g_now + (uint64_t)(opt.before_s * 1e9);
  g_t_deadline = g_t_warm + (uint64_t)(opt.timeout_s * 1e9);
  probe_send();
  run_loop(probe_done, probe_tick);
  double to_first = g_first_grant_new ? (g_first_grant_new - g_t_signal) / 1e6 : -1;
  double gap = g_first_grant_new ? (g_first_grant_new - g_last_grant_old) / 1e6 : -1;
  printf("{\"mode\":\"probe\",\"proto\":\"lockd\",\"signal\":%d,\"signal_to_grant_ms\":%.3f,"
         "\"gap_ms\":%.3f,\"grants_before\":%ld,\"grants_old_after_signal\":%ld,"
         "\"errors_after_signal\":%ld,\"redirects\":%ld,",
         opt.signal, to_first, gap, g_seq, g_grants_old_after, g_errors_after, g_redirects);
  print_errors_json();
  printf("}\n");
}

/* ---------------------------------------------------------------- main */

int main(int argc, char **argv) {
  signal(SIGPIPE, SIG_IGN);
  parse_args(argc, argv);
  g_ep = epoll_create1(0);
  if (g_ep < 0) die("epoll_create1: %s", strerror(errno));
  if (opt.proto == REDIS) redis_script_load(opt.port);
  if (!strcmp(opt.mode, "pairs")) mode_pairs();
  else if (!strcmp(opt.mode, "contend")) mode_contend();
  else if (!strcmp(opt.mode, "fill")) mode_fill();
  else if (!strcmp(opt.mode, "waiters")) mode_waiters();
  else if (!strcmp(opt.mode, "probe")) mode_probe();
  else die("unknown mode %s", opt.mode);
  return 0;
}
