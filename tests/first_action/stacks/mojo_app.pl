#!/usr/bin/perl
# The corpus's Mojolicious::Lite app (Debian's libmojolicious-perl), run in production mode:
# every failure goes through Mojolicious' own paths (reply->not_found, an exception caught by
# the dispatcher), as HTML pages under / and as JSON under /api (exception_format 'json',
# the setting an API sets).
use Mojolicious::Lite -signatures;

my %items = (1 => 'apple');

get '/items/:id' => [id => qr/\d+/] => sub ($c) {
  my $id = $c->param('id');
  return $c->reply->not_found unless exists $items{$id};
  $c->render(json => {id => $id + 0, name => $items{$id}});
};

get '/items/:id/price' => sub ($c) {
  my $id = $c->param('id');
  die "price of item $id: not a number\n" unless $id =~ /^\d+$/;
  $c->render(json => {price => 3});
};

under '/api' => sub ($c) {
  $c->exception_format('json');
  return 1;
};

get '/items/:id' => [id => qr/\d+/] => sub ($c) {
  my $id = $c->param('id');
  return $c->reply->not_found unless exists $items{$id};
  $c->render(json => {id => $id + 0, name => $items{$id}});
};

post '/items' => sub ($c) {
  my $body = $c->req->json;
  die "the body is not a JSON object\n" unless ref $body eq 'HASH';
  $c->render(json => {name => $body->{name}}, status => 201);
};

get '/items/:id/price' => sub ($c) {
  my $id = $c->param('id');
  die "price of item $id: not a number\n" unless $id =~ /^\d+$/;
  $c->render(json => {price => 3});
};

app->start;
