vcl 4.1;
# Varnish Cache 7.1 in front of three backends: one that answers, one that is down, one that
# is slow. The error pages are Varnish's own: the built-in vcl_backend_error and vcl_synth
# ("Guru Meditation", bin/varnishd/builtin.vcl), with the status and reason given to synth().
backend good { .host = "127.0.0.1"; .port = "{port2}"; }
backend down { .host = "127.0.0.1"; .port = "{closed}"; }
backend slow { .host = "127.0.0.1"; .port = "{port3}"; .first_byte_timeout = 1s; }

sub vcl_recv {
    if (req.method == "PURGE") {
        return (synth(405, "Purging is not allowed from this address"));
    }
    if (req.url ~ "^/api/") {
        set req.backend_hint = down;
    } elsif (req.url ~ "^/slow/") {
        set req.backend_hint = slow;
    } else {
        set req.backend_hint = good;
    }
}
