/** Test helper: a server logger (`server/log.ts`) that keeps every line, with its level. */

import type { Logger } from "../server/log.ts";

/** A logger that keeps every line, with its level: `"warn <message>"`. */
export function capturingLogger(): Logger & { lines: string[] } {
  const lines: string[] = [];
  return {
    lines,
    debug: (m) => lines.push(`debug ${m}`),
    info: (m) => lines.push(`info ${m}`),
    warn: (m) => lines.push(`warn ${m}`),
    error: (m) => lines.push(`error ${m}`),
  };
}
