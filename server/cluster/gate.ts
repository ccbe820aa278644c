/**
 * How a cluster node treats a client request (docs/cluster.md, "Roles"): the active serves
 * (or parks while it checks for another active after a pause), a node handing over or
 * taking over parks, and a standby redirects to the active it can vouch for, or answers
 * `E no active node`. Pure.
 *
 * @module
 */

import type { Gate } from "../session_context.ts";
import type { Role } from "./election.ts";
import { NO_ACTIVE, redirectTo } from "./handoff.ts";

const SERVE: Gate = { kind: "serve" };
const PARK: Gate = { kind: "park" };
const NO_ACTIVE_GATE: Gate = { kind: "refuse", refusal: NO_ACTIVE };

/** What the gate depends on. */
export interface GateState {
  /** This node's role. */
  role: Role;
  /** The active node checks for another active after a pause of this process. */
  frozen: boolean;
  /** This node agreed to take over and waits for the COMMIT. */
  taking: boolean;
  /** The active this node follows, if it knows one. */
  active: string | undefined;
  /**
   * Whether `active` can be vouched for now: heard live as active (directly or through a
   * peer), or the successor of this node's own handover, which parks requests until its
   * COMMIT arrives.
   */
  vouched: boolean;
}

/** The treatment of a client request in `state`. */
export function gateOf(state: GateState): Gate {
  switch (state.role) {
    case "active":
      return state.frozen ? PARK : SERVE;
    case "handing-off":
      return PARK;
    default:
      if (state.taking) return PARK;
      return state.active !== undefined && state.vouched
        ? { kind: "refuse", refusal: redirectTo(state.active) }
        : NO_ACTIVE_GATE;
  }
}
