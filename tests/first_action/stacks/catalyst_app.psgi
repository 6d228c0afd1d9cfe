# The corpus's Catalyst app (Debian's libcatalyst-perl) in one file, served by plackup in the
# deployment environment: failures go through Catalyst's own paths (the dispatcher's unknown
# resource, finalize_error's page outside debug mode, an exception with a `code` handed to
# Plack::Middleware::HTTPExceptions, as Catalyst documents for HTTP::Exception and its kin).
use strict;
use warnings;

package CorpusApp::HTTPError;
# The interface Plack::Middleware::HTTPExceptions reads (what HTTP::Exception provides).
sub new { my ($class, %args) = @_; return bless {%args}, $class }
sub code { $_[0]{code} }
sub as_string { $_[0]{message} }
sub throw { my $class = shift; die $class->new(@_) }

package CorpusApp::Controller::Root;
use Moose;
BEGIN { extends 'Catalyst::Controller' }
__PACKAGE__->config(namespace => '');

my %items = (1 => 'apple');

sub item :Path('/items') :Args(1) :GET {
    my ($self, $c, $id) = @_;
    die "item id '$id' is not a number\n" unless $id =~ /^\d+$/;
    CorpusApp::HTTPError->throw(code => 404, message => "Item $id does not exist")
        unless exists $items{$id};
    $c->res->content_type('application/json');
    $c->res->body(qq({"id": $id, "name": "$items{$id}"}));
}

sub create :Path('/items') :Args(0) :POST {
    my ($self, $c) = @_;
    my $body = $c->req->body_data;
    my $name = ref $body eq 'HASH' ? $body->{name} : undef;
    CorpusApp::HTTPError->throw(code => 400, message => "Field 'name' is required")
        unless defined $name && length $name;
    CorpusApp::HTTPError->throw(code => 409, message => "An item named $name already exists")
        if grep { $_ eq $name } values %items;
    $c->res->status(201);
    $c->res->content_type('application/json');
    $c->res->body(qq({"name": "$name"}));
}

package CorpusApp;
use Catalyst;
__PACKAGE__->config(name => 'CorpusApp', disable_component_resolution_regex_fallback => 1);
__PACKAGE__->setup;

package main;
CorpusApp->apply_default_middlewares(CorpusApp->psgi_app);
