// The REST API's operations, paths and errors: pure, so that node's test runner runs them.

import type { Operations } from './wire';

/** An operation of the spec, as it names it: "GET /claims", "DELETE /claims/{name}". */
export type Operation = keyof Operations;
export type Answer<O extends Operation> = Operations[O]['answer'];
export type Body<O extends Operation> = Operations[O]['body'];
export type Parameters<O extends Operation> = Operations[O]['parameters'];

/** The one-line message shown when the server has no dra-jupyter extension. */
export const UNAVAILABLE =
  'The dra-jupyter server extension is unavailable: install it with ' +
  "'pip install dra-jupyter' in the environment that runs this server, restart the " +
  "server, and check that 'jupyter server extension list' shows dra_jupyter enabled.";

/**
 * An error answer of the REST API: the HTTP status and the server's one-line message
 * (which says where, what and what to do), or {@link UNAVAILABLE} when the server has no
 * dra-jupyter extension (a 404 that is not JSON).
 */
export class DraRequestError extends Error {
  constructor(
    message: string,
    readonly status: number,
    readonly reason: string | null = null
  ) {
    super(message);
    this.name = 'DraRequestError';
  }

  /** The server has no dra-jupyter extension, or it could not be reached. */
  get unavailable(): boolean {
    return this.message === UNAVAILABLE || this.status === 0;
  }
}

/**
 * The error of an answer that is not ok, from its status, content type and text.
 * The server extension answers errors as JSON `{message, reason}` (spec: Error); an
 * answer that is not JSON comes from elsewhere (no extension: the server's HTML 404).
 */
export function errorFromAnswer(
  status: number,
  contentType: string,
  text: string
): DraRequestError {
  if (!contentType.includes('json')) {
    if (status === 404) {
      return new DraRequestError(UNAVAILABLE, status);
    }
    return new DraRequestError(
      `dra-jupyter: the server answered HTTP ${status} without a message; check the server log`,
      status
    );
  }
  let message = '';
  let reason: string | null = null;
  try {
    const body: unknown = JSON.parse(text);
    if (typeof body === 'object' && body !== null) {
      const m = (body as { message?: unknown }).message;
      const r = (body as { reason?: unknown }).reason;
      message = typeof m === 'string' ? m : '';
      reason = typeof r === 'string' ? r : null;
    }
  } catch {
    // not JSON after all: the message below says so
  }
  // one line: a message is never shown with the traceback the server may log
  const line = message.split('\n')[0].trim();
  return new DraRequestError(
    line || `dra-jupyter: the server answered HTTP ${status}${reason ? ` (${reason})` : ''}`,
    status,
    reason
  );
}

/** The path of an operation with its path parameters filled in. */
export function operationPath(
  operation: Operation,
  parameters: Record<string, string | number | undefined> = {}
): { method: string; path: string; query: string } {
  const [method, template] = operation.split(' ');
  const used = new Set<string>();
  const path = template.replace(/\{(\w+)\}/g, (_, name: string) => {
    used.add(name);
    const value = parameters[name];
    if (value === undefined) {
      throw new Error(`${operation}: the path parameter ${name} is missing`);
    }
    return encodeURIComponent(String(value));
  });
  const query = new URLSearchParams();
  for (const [k, v] of Object.entries(parameters)) {
    if (!used.has(k) && v !== undefined) {
      query.set(k, String(v));
    }
  }
  if (method === 'GET') {
    // polling is not activity: jupyter_server does not bump last_activity for it
    query.set('no_track_activity', '1');
  }
  const q = query.toString();
  return { method, path, query: q ? `?${q}` : '' };
}

/** How the model calls the REST API (the page's server connection; a table in tests). */
export type Requester = <O extends Operation>(
  operation: O,
  parameters?: Parameters<O>,
  body?: Body<O>
) => Promise<Answer<O>>;
