# The corpus's Rack app (Debian's ruby-rack 2.2) on Puma (Debian's puma 5.6), run in production:
# every failure is one that Rack's own components or Puma answer, nothing of the app's making
# (Rack::URLMap's 404, Rack::Files' 404 and 405, Rack::Auth::Basic's 401 and 400, Rack's
# query parser raising into Puma's lowlevel_error 500).
require 'json'
require 'rack'

files = File.join(Dir.pwd, 'files')

items = lambda do |env|
  request = Rack::Request.new(env)
  limit = Integer(request.params.fetch('limit', '10'))
  [200, { 'Content-Type' => 'application/json' }, [JSON.generate(items: ['apple'], limit: limit)]]
end

report = lambda do |_env|
  [200, { 'Content-Type' => 'text/plain' }, ["report\n"]]
end

map '/files' do
  run Rack::Files.new(files)
end

map '/items' do
  run items
end

map '/admin' do
  use Rack::Auth::Basic, 'corpus' do |user, password|
    user == 'admin' && password == 'secret'
  end
  run report
end
