# Sinatra 3 (Debian's ruby-sinatra) on WEBrick, in production: every error body here is
# Sinatra's own. Error pages: sinatra/base.rb (halt CODE, BODY sends the body as given;
# not_found answers "<h1>Not Found</h1>"; an exception in production answers
# "<h1>Internal Server Error</h1>", Base#handle_exception!; a mismatched method is a 404 too,
# since routes are per method); Rack::Protection (403 "Forbidden" for a failed check).
require "sinatra/base"
require "json"

class CorpusApp < Sinatra::Base
  set :environment, :production
  set :show_exceptions, false
  set :raise_errors, false
  set :logging, false
  set :host_authorization, { permitted_hosts: [] }

  ITEMS = { "1" => { "id" => 1, "name" => "apple" } }

  get "/items/:id" do
    item = ITEMS[params[:id]]
    halt 404, "Item #{params[:id]} not found" unless item
    content_type :json
    item.to_json
  end

  post "/items" do
    body = JSON.parse(request.body.read) rescue halt(400, "The body must be a JSON object")
    halt 422, "name is required" unless body.is_a?(Hash) && body["name"]
    halt 409, "An item named '#{body["name"]}' already exists" if ITEMS.values.any? { |i| i["name"] == body["name"] }
    status 201
    content_type :json
    { "id" => 2, "name" => body["name"] }.to_json
  end

  get "/crash" do
    raise "boom"
  end
end

CorpusApp.run!(bind: "127.0.0.1", port: Integer(ARGV[0]), server: "webrick", quiet: true)
