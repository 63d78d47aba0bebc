// One typed call of the server extension's REST API (under <base URL>dra/api/).

import { URLExt } from '@jupyterlab/coreutils';
import { ServerConnection } from '@jupyterlab/services';

import {
  type Answer,
  type Body,
  DraRequestError,
  errorFromAnswer,
  type Operation,
  operationPath,
  type Parameters
} from './api';

export { DraRequestError } from './api';

/**
 * Call one operation of the REST API through the page's server connection (its base URL,
 * token and XSRF cookie).
 *
 * @returns the JSON answer the spec gives the operation (null for 204)
 * @throws {DraRequestError} if the answer is not ok, or the server cannot be reached
 */
export async function requestAPI<O extends Operation>(
  operation: O,
  parameters?: Parameters<O>,
  body?: Body<O>,
  settings: ServerConnection.ISettings = ServerConnection.makeSettings()
): Promise<Answer<O>> {
  const { method, path, query } = operationPath(
    operation,
    (parameters ?? {}) as Record<string, string | number | undefined>
  );
  const url = URLExt.join(settings.baseUrl, 'dra', 'api', path) + query;
  const init: RequestInit = { method };
  if (body !== undefined && body !== null) {
    init.body = JSON.stringify(body);
  }
  let response: Response;
  try {
    response = await ServerConnection.makeRequest(url, init, settings);
  } catch (err) {
    throw new DraRequestError(
      `dra-jupyter: the Jupyter server cannot be reached (${String(err)})`,
      0
    );
  }
  const text = await response.text();
  if (!response.ok) {
    throw errorFromAnswer(response.status, response.headers.get('Content-Type') ?? '', text);
  }
  return (text ? JSON.parse(text) : null) as Answer<O>;
}
