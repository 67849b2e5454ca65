-- wrk cannot use a proxy, but it can speak to one: pointed at the proxy,
-- it sends every request in absolute form (GET http://host/path HTTP/1.1),
-- which is how a client forwards plain HTTP through an HTTP proxy.
-- run.sh sets TARGET_URL, e.g. http://198.18.200.2/bytes/1024.
local target = os.getenv("TARGET_URL")
if target == nil or target == "" then
  error("proxy.lua: set TARGET_URL")
end
wrk.path = target
-- The absolute URI wins over Host (RFC 9112 §3.2.2), but send a Host that
-- agrees with it, as real clients do.
wrk.headers["Host"] = target:match("^%a+://([^/]+)")
