/**
 * Plain HTTP answers, shared by the bridge's handler and the node's HTTP endpoints: an
 * explicit Content-Length, and for a HEAD the same status and headers with no body. HTTP/2
 * forbids a body on a HEAD answer and `Deno.serve` sends it there (clients see
 * PROTOCOL_ERROR); only HTTP/1.1 drops it. Web APIs only.
 *
 * @module
 */

const encoder = new TextEncoder();

/** The Content-Length of `body`: its UTF-8 length in bytes, as a header value. */
export function contentLength(body: string): string {
  return String(encoder.encode(body).byteLength);
}

/**
 * `response` as the answer to `request`: itself, or for a HEAD the same status and headers
 * (its Content-Length included) with no body.
 */
export function forMethod(request: Request, response: Response): Response {
  if (request.method !== "HEAD") return response;
  response.body?.cancel();
  return new Response(null, { status: response.status, headers: response.headers });
}
