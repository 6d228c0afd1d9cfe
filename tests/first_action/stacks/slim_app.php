<?php
// The corpus's Slim 3 app (Debian's php-slim) behind PHP's built-in server: every failure is
// one of Slim's own handlers (NotFound and NotAllowed, by Accept; Error for an exception;
// PhpError for a PHP error), with displayErrorDetails at its default (off).
require '/usr/share/php/Slim/autoload.php';

use Psr\Http\Message\ResponseInterface as Response;
use Psr\Http\Message\ServerRequestInterface as Request;

$app = new \Slim\App();
$items = [1 => 'apple'];

$app->get('/items/{id:[0-9]+}', function (Request $request, Response $response, array $args) use ($items) {
    $id = (int) $args['id'];
    if (!isset($items[$id])) {
        throw new \Slim\Exception\NotFoundException($request, $response);
    }
    return $response->withJson(['id' => $id, 'name' => $items[$id]]);
});

$app->post('/items', function (Request $request, Response $response) {
    $body = $request->getParsedBody();
    return $response->withJson(['name' => $body['name']], 201);
});

$app->get('/items/{id}/price', function (Request $request, Response $response, array $args) {
    if ($args['id'] === 'legacy') {
        return $response->withJson(['price' => legacy_price($args['id'])]);
    }
    throw new \RuntimeException('price service returned no answer for item ' . $args['id']);
});

$app->run();
