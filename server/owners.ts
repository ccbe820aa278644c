/**
 * Who holds a lock (docs/protocol.md, "Sessions"): every grant to a connection that sent a
 * hello records an owner id in the lock table, and this registry maps ids to the client's
 * name, its session, and whether the grant is bound to that session. One owner per
 * (name, session, bound), shared by the client's connections; ids are replicated with the
 * grants, so a standby knows who holds what. Pure.
 *
 * @module
 */

/** The owner of grants. */
export interface Owner {
  /** Its id in the lock table (1 and up; 0 is "unknown"). */
  readonly id: number;
  /** The client's name from its hello. */
  readonly name: string;
  /** Its session id, if it has one. */
  readonly session: string | undefined;
  /** Whether its grants are released when its session is gone for the grace period. */
  readonly bound: boolean;
}

/** Owners by id and by identity. */
export class Owners {
  #byId = new Map<number, Owner>();
  #byIdentity = new Map<string, Owner>();
  #next = 1;
  #epoch = 0;
  #created: ((owner: Owner) => void) | undefined;
  #gone: ((id: number) => void) | undefined;

  /**
   * @param events `created` with every owner this node creates, `gone` with every id it
   * sweeps (to replicate both).
   */
  constructor(events: { created?(owner: Owner): void; gone?(id: number): void } = {}) {
    this.#created = events.created;
    this.#gone = events.gone;
  }

  /** Number of owners known. */
  get size(): number {
    return this.#byId.size;
  }

  /** The owner for (`name`, `session`, `bound`), created if new. */
  intern(name: string, session: string | undefined, bound: boolean): Owner {
    const identity = `${bound ? 1 : 0} ${session ?? "-"} ${name}`;
    let owner = this.#byIdentity.get(identity);
    if (owner === undefined) {
      owner = { id: this.#next++, name, session, bound };
      this.#add(owner, identity);
      this.#created?.(owner);
    }
    return owner;
  }

  /** Installs an owner made elsewhere (replication), keeping its id. */
  install(owner: Owner): void {
    const identity = `${owner.bound ? 1 : 0} ${owner.session ?? "-"} ${owner.name}`;
    const known = this.#byId.get(owner.id);
    if (known !== undefined) this.#byIdentity.delete(this.#identity(known));
    this.#add(owner, identity);
    if (owner.id >= this.#next) this.#next = owner.id + 1;
  }

  /** The owner with `id`. */
  get(id: number): Owner | undefined {
    return this.#byId.get(id);
  }

  /** Every owner. */
  all(): IterableIterator<Owner> {
    return this.#byId.values();
  }

  /** The bound owners of `session` (their grants go when the session does). */
  boundOf(session: string): Owner[] {
    return [...this.#byId.values()].filter((o) => o.bound && o.session === session);
  }

  /**
   * Forgets the owners that hold nothing (`used` are the ids in the lock table) and whose
   * session has no connection open (`live`), so a server with many short-lived clients does
   * not grow forever.
   */
  sweep(used: ReadonlySet<number>, live: (session: string) => boolean): void {
    for (const owner of [...this.#byId.values()]) {
      if (used.has(owner.id)) continue;
      if (owner.session !== undefined && live(owner.session)) continue;
      this.forget(owner.id);
      this.#gone?.(owner.id);
    }
  }

  /** Forgets the owner `id` (the active forgot it). */
  forget(id: number): void {
    const owner = this.#byId.get(id);
    if (owner === undefined) return;
    this.#byId.delete(id);
    this.#byIdentity.delete(this.#identity(owner));
    this.#epoch++;
  }

  /** Changes whenever owners are forgotten: a cached id is valid while it stays the same. */
  get epoch(): number {
    return this.#epoch;
  }

  /** Forgets every owner (a standby before a snapshot). */
  clear(): void {
    this.#byId.clear();
    this.#byIdentity.clear();
    this.#epoch++;
  }

  #add(owner: Owner, identity: string): void {
    this.#byId.set(owner.id, owner);
    this.#byIdentity.set(identity, owner);
  }

  #identity(owner: Owner): string {
    return `${owner.bound ? 1 : 0} ${owner.session ?? "-"} ${owner.name}`;
  }
}

/**
 * The grace period of sessions (docs/protocol.md, "Sessions"): a session whose last
 * connection closed is gone once the grace has passed without a new one, and then its
 * bound grants are released. Counted on the monotonic clock; pure.
 */
export class SessionGrace {
  #open = new Map<string, number>();
  #deadlines = new Map<string, number>();
  #graceMs: number;
  #serving: () => boolean;

  /**
   * @param graceMs How long a session may have no connection before it is gone, ms.
   * @param serving Whether this node serves now: only then does a grace start (a standby
   *   releases nothing; the sessions it mirrors get their grace when it becomes active).
   */
  constructor(graceMs: number, serving: () => boolean = () => true) {
    this.#graceMs = graceMs;
    this.#serving = serving;
  }

  /** Sessions with a connection open or within their grace period. */
  get size(): number {
    return this.#open.size + this.#deadlines.size;
  }

  /** Whether `session` has a connection open now. */
  live(session: string): boolean {
    return this.#open.has(session);
  }

  /** A connection of `session` said hello: the session is back, if it was going. */
  attach(session: string): void {
    this.#open.set(session, (this.#open.get(session) ?? 0) + 1);
    this.#deadlines.delete(session);
  }

  /**
   * A connection of `session` closed at `now`: with none left, the grace starts (on a node
   * that serves; elsewhere the session is simply no longer counted).
   */
  detach(session: string, now: number): void {
    const open = (this.#open.get(session) ?? 1) - 1;
    if (open > 0) {
      this.#open.set(session, open);
      return;
    }
    this.#open.delete(session);
    if (this.#serving()) this.#deadlines.set(session, now + this.#graceMs);
  }

  /**
   * This node became active at `now`: every session in `sessions` (those with bound
   * grants) that has no connection here gets the full grace from now, so clients that
   * reconnect in time keep their locks.
   */
  expect(sessions: Iterable<string>, now: number): void {
    for (const session of sessions) {
      if (!this.#open.has(session) && !this.#deadlines.has(session)) {
        this.#deadlines.set(session, now + this.#graceMs);
      }
    }
  }

  /** The sessions whose grace ran out by `now` (each reported once). */
  due(now: number): string[] {
    const gone: string[] = [];
    for (const [session, deadline] of this.#deadlines) {
      if (deadline <= now) gone.push(session);
    }
    for (const session of gone) this.#deadlines.delete(session);
    return gone;
  }

  /** The earliest grace deadline, or `undefined`. */
  nextDeadline(): number | undefined {
    let next: number | undefined;
    for (const deadline of this.#deadlines.values()) {
      if (next === undefined || deadline < next) next = deadline;
    }
    return next;
  }

  /** Forgets every deadline (this node is not active any more); open connections stay counted. */
  clearDeadlines(): void {
    this.#deadlines.clear();
  }
}
