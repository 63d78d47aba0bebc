import assert from 'node:assert/strict';
import { test } from 'node:test';

import { DraRequestError, errorFromAnswer, operationPath, UNAVAILABLE } from '../src/api';

test("an error answer's message is the server's, on one line", () => {
  const e = errorFromAnswer(
    409,
    'application/json',
    JSON.stringify({ message: 'gpu=9: 8 GPUs match, all busy\nTraceback ...', reason: 'busy' })
  );
  assert.ok(e instanceof DraRequestError);
  assert.equal(e.message, 'gpu=9: 8 GPUs match, all busy');
  assert.equal(e.status, 409);
  assert.equal(e.reason, 'busy');
  assert.equal(e.unavailable, false);
});

test('an answer without a message names the status (and reason)', () => {
  const e = errorFromAnswer(503, 'application/json', JSON.stringify({ reason: 'down' }));
  assert.equal(e.message, 'dra-jupyter: the server answered HTTP 503 (down)');
  assert.equal(
    errorFromAnswer(500, 'application/json', 'not json').message,
    'dra-jupyter: the server answered HTTP 500'
  );
});

test('a 404 that is not JSON: the server extension is missing, and how to install it', () => {
  const e = errorFromAnswer(404, 'text/html', '<html>404</html>');
  assert.equal(e.message, UNAVAILABLE);
  assert.ok(e.unavailable);
  assert.match(e.message, /pip install dra-jupyter/);
  assert.match(e.message, /jupyter server extension list/);
  assert.match(errorFromAnswer(502, 'text/html', '').message, /HTTP 502 without a message/);
});

test('operation paths: parameters encoded, GETs marked as not activity', () => {
  assert.deepEqual(operationPath('GET /claims'), {
    method: 'GET',
    path: '/claims',
    query: '?no_track_activity=1'
  });
  assert.deepEqual(operationPath('DELETE /claims/{name}', { name: 'a b' }), {
    method: 'DELETE',
    path: '/claims/a%20b',
    query: ''
  });
  assert.deepEqual(operationPath('GET /metrics', { history: 3 }), {
    method: 'GET',
    path: '/metrics',
    query: '?history=3&no_track_activity=1'
  });
  assert.throws(() => operationPath('POST /claims/{name}/keep', {}), /name is missing/);
});
