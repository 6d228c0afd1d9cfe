<?php
// PHP's built-in web server (php -S, Debian's php-cli) with this router script. The error
// pages for a missing file and for a method on a static file are the server's own
// (sapi/cli/php_cli_server.c, php_cli_server_send_error_page: "<h1>Not Found</h1><p>The
// requested resource <code class="url">/x</code> was not found on this server.</p>"); a
// fatal error is PHP's own 500 (display_errors off: an empty body); json_decode failures and
// http_response_code are the script's use of PHP's own functions.
$path = parse_url($_SERVER["REQUEST_URI"], PHP_URL_PATH);
if (str_starts_with($path, "/static/")) {
    return false;  // the built-in server serves (or refuses) the file itself
}
if ($path === "/items" && $_SERVER["REQUEST_METHOD"] === "POST") {
    $body = json_decode(file_get_contents("php://input"), true, 512, JSON_THROW_ON_ERROR);
    header("Content-Type: application/json");
    http_response_code(201);
    echo json_encode(["id" => 2, "name" => $body["name"]]);
    return true;
}
if ($path === "/crash") {
    undefined_function();
}
http_response_code(404);
header("Content-Type: text/plain");
echo "No route for $path\n";
