/**
 * The server's log: one line per event on stderr, never a secret. The ready line on stdout
 * is not a log line (see `main.ts`).
 *
 * @module
 */

/** Where the server's components report events. */
export interface Logger {
  /** Details for debugging (peer traffic with `LOCKD_TRACE=1`). */
  debug(message: string): void;
  /** Normal events: role changes, shutdown. */
  info(message: string): void;
  /** Something went wrong but the server carries on (a dropped connection, a refused peer). */
  warn(message: string): void;
  /** Something the operator must act on (tokens cannot be saved, a fatal stop). */
  error(message: string): void;
}

/** Options of {@linkcode stderrLogger}. */
export interface StderrLoggerOptions {
  /** Print `debug` lines too. Default false. */
  debug?: boolean;
}

/** A logger writing `lockd: <message>` lines on stderr. */
export function stderrLogger(options: StderrLoggerOptions = {}): Logger {
  const print = (message: string) => console.error(`lockd: ${message}`);
  return {
    debug: options.debug ? print : () => {},
    info: print,
    warn: print,
    error: print,
  };
}

/** A logger that drops everything (tests, embedders that log elsewhere). */
export const silentLogger: Logger = {
  debug: () => {},
  info: () => {},
  warn: () => {},
  error: () => {},
};
