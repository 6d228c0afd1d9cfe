-- wrk's end-of-run hook: one JSON line the harness parses (no scraping of wrk's text).
done = function(summary, latency, requests)
  local e = summary.errors
  io.write(string.format(
    '\nBENCH_JSON {"requests":%d,"duration_us":%d,"bytes":%d,"connect":%d,"read":%d,' ..
    '"write":%d,"status":%d,"timeout":%d,"p50_us":%.0f,"p99_us":%.0f}\n',
    summary.requests, summary.duration, summary.bytes, e.connect, e.read, e.write,
    e.status, e.timeout, latency:percentile(50), latency:percentile(99)))
end
