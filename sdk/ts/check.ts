// `make sdk-check`: a TypeScript client generated from openapi.yaml
// (openapi-typescript for the types, openapi-fetch for the calls) against a
// running gateway. It starts nothing itself: the gateway's URL comes from
// LOCKGW_URL (sdk/ts/check.sh starts one). tsc type-checks every call
// against the generated types before this runs, so a spec change that
// breaks clients breaks the build too.
import createClient from "openapi-fetch";
import type { paths } from "./gen/lockgateway.js";

const base = process.env.LOCKGW_URL;
if (!base) {
  console.error("check: set LOCKGW_URL to the gateway, e.g. http://127.0.0.1:8080");
  process.exit(2);
}

const api = createClient<paths>({ baseUrl: base });
const problem = (slug: string) => `https://lockgateway.dev/problems/${slug}`;

function check(ok: unknown, what: string): asserts ok {
  if (!ok) {
    throw new Error(what);
  }
}

async function exercise(key: string): Promise<void> {
  const path = { key };

  // Acquire: 201 with the lease, its token as the ETag.
  const acquired = await api.PUT("/locks/{key}", {
    params: { path },
    body: { ttl_ms: 5000, owner: "sdk-check" },
  });
  check(acquired.response.status === 201, `acquire ${key}: status ${acquired.response.status}`);
  const lease = acquired.data;
  // The PUT's 200/201 is JSON, or a hold's event stream (text) when asked
  // for one with Accept: text/event-stream; typeof tells them apart.
  check(lease !== undefined && typeof lease !== "string", `acquire ${key}: no body`);
  check(lease.key === key, `acquire: key ${lease.key}, want ${key}`);
  check(lease.owner === "sdk-check", `acquire: owner ${lease.owner}`);
  check(lease.ttl_ms === 5000, `acquire: ttl_ms ${lease.ttl_ms}`);
  check(Number.isSafeInteger(lease.fence) && lease.fence > 0, `acquire: fence ${lease.fence}`);
  check(lease.token.length >= 22, "acquire: token too short");
  check(acquired.response.headers.get("ETag") === `"${lease.token}"`, "acquire: ETag is not the token");

  // The gateway holds the key itself: the plain path names the same lock
  // as the percent-encoded one openapi-fetch sent.
  const plain = await fetch(`${base}/locks/${key}`);
  check(plain.status === 200, `GET /locks/${key} (unencoded): status ${plain.status}`);

  // Someone else: 409 lock-held, with Retry-After.
  const held = await api.PUT("/locks/{key}", { params: { path }, body: {} });
  check(held.response.status === 409, `second acquire: status ${held.response.status}`);
  check(held.error?.type === problem("lock-held"), `second acquire: type ${held.error?.type}`);
  const retryAfter = Number(held.response.headers.get("Retry-After"));
  check(retryAfter >= 1 && retryAfter <= 5, `second acquire: Retry-After ${retryAfter}`);

  // Inspect: holder and fence, never the token.
  const inspected = await api.GET("/locks/{key}", { params: { path } });
  check(inspected.response.status === 200, `inspect: status ${inspected.response.status}`);
  const info = inspected.data;
  // The GET's 200 is JSON, or an event stream (text) when asked for one
  // with Accept: text/event-stream; typeof tells the types apart.
  check(info !== undefined && typeof info !== "string", "inspect: no body");
  check(info.fence === lease.fence && info.owner === "sdk-check", `inspect: ${JSON.stringify(info)}`);
  check(info.ttl_ms > 0 && info.ttl_ms <= 5000, `inspect: ttl_ms ${info.ttl_ms}`);
  check(!("token" in info), "inspect: the token leaked");

  // Extend: same fence, new TTL.
  const extended = await api.PATCH("/locks/{key}", {
    params: { path, header: { "Lock-Token": lease.token } },
    body: { ttl_ms: 10000 },
  });
  check(extended.response.status === 200, `extend: status ${extended.response.status}`);
  check(extended.data?.fence === lease.fence, "extend: the fence changed");
  check(extended.data?.ttl_ms === 10000, `extend: ttl_ms ${extended.data?.ttl_ms}`);

  // The ETag works as well as Lock-Token; someone else's token is 412.
  const byETag = await api.PATCH("/locks/{key}", {
    params: { path, header: { "If-Match": `"${lease.token}"` } },
  });
  check(byETag.response.status === 200, `extend with If-Match: status ${byETag.response.status}`);
  const wrong = await api.DELETE("/locks/{key}", {
    params: { path, header: { "Lock-Token": "someone-elses-token-0000" } },
  });
  check(wrong.response.status === 412, `release with another token: status ${wrong.response.status}`);
  check(wrong.error?.type === problem("token-mismatch"), `release with another token: type ${wrong.error?.type}`);

  // Release: 204; then there is nothing left to release or inspect.
  const released = await api.DELETE("/locks/{key}", {
    params: { path, header: { "Lock-Token": lease.token } },
  });
  check(released.response.status === 204, `release: status ${released.response.status}`);
  const again = await api.DELETE("/locks/{key}", {
    params: { path, header: { "Lock-Token": lease.token } },
  });
  check(again.response.status === 404, `second release: status ${again.response.status}`);
  check(again.error?.type === problem("lock-not-found"), `second release: type ${again.error?.type}`);
  const gone = await api.GET("/locks/{key}", { params: { path } });
  check(gone.response.status === 404, `inspect after release: status ${gone.response.status}`);
  check(gone.response.headers.get("ETag") === 'W/"free"', `inspect after release: ETag ${gone.response.headers.get("ETag")}`);

  // A long-poll that sees no change within its wait: 304, same ETag.
  const unchanged = await api.GET("/locks/{key}", {
    params: { path, header: { "If-None-Match": 'W/"free"', Prefer: "wait=1" } },
  });
  check(unchanged.response.status === 304, `long-poll: status ${unchanged.response.status}`);
  check(unchanged.response.headers.get("Preference-Applied") === "wait=1", "long-poll: Preference-Applied");
}

const run = Date.now().toString(36);
for (const key of [`sdk-check-${run}`, `jobs/nightly-${run}`, `sku:4711@warehouse-eu/${run}`]) {
  try {
    await exercise(key);
    console.log(`ok   ${key}: acquire, inspect, extend, release`);
  } catch (err) {
    console.error(`FAIL ${key}: ${err instanceof Error ? err.message : String(err)}`);
    process.exit(1);
  }
}
