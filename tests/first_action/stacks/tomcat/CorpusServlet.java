// The corpus's servlet for Tomcat 10 (jakarta.servlet): every failure goes through the
// container's own paths (sendError, an uncaught exception, the HttpServlet method check), so
// the page is the ErrorReportValve's.
import jakarta.servlet.ServletException;
import jakarta.servlet.http.HttpServlet;
import jakarta.servlet.http.HttpServletRequest;
import jakarta.servlet.http.HttpServletResponse;
import java.io.IOException;

public class CorpusServlet extends HttpServlet {
    @Override
    protected void doGet(HttpServletRequest req, HttpServletResponse resp) throws IOException {
        String path = req.getServletPath();
        if (path.equals("/admin/report")) {
            resp.setContentType("text/plain");
            resp.getWriter().write("report\n");
            return;
        }
        if (path.equals("/hello")) {
            resp.setContentType("application/json");
            resp.getWriter().write("{\"hello\": \"world\"}");
            return;
        }
        String id = req.getParameter("id");
        if (id == null) {
            resp.sendError(HttpServletResponse.SC_BAD_REQUEST, "Required parameter 'id' is missing");
            return;
        }
        int number = Integer.parseInt(id);
        if (number == 7) {
            resp.setHeader("Retry-After", "30");
            resp.sendError(429, "Too many lookups of item 7; retry in 30 seconds");
            return;
        }
        if (number == 8) {
            resp.setHeader("Retry-After", "60");
            resp.sendError(HttpServletResponse.SC_SERVICE_UNAVAILABLE, "The item store is being reindexed");
            return;
        }
        if (number > 100) {
            resp.sendError(HttpServletResponse.SC_NOT_FOUND, "Item " + number + " does not exist");
            return;
        }
        resp.setContentType("application/json");
        resp.getWriter().write("{\"id\": " + number + "}");
    }

    @Override
    protected void doPost(HttpServletRequest req, HttpServletResponse resp)
            throws IOException, ServletException {
        if (!req.getServletPath().equals("/items")) {
            super.doPost(req, resp);
            return;
        }
        String type = req.getContentType();
        if (type == null || !type.startsWith("application/x-www-form-urlencoded")) {
            resp.sendError(HttpServletResponse.SC_UNSUPPORTED_MEDIA_TYPE,
                "Send the item as application/x-www-form-urlencoded");
            return;
        }
        String name = req.getParameter("name");
        if (name == null || name.isEmpty()) {
            resp.sendError(HttpServletResponse.SC_BAD_REQUEST, "Form field 'name' is required");
            return;
        }
        if (name.equals("apple")) {
            resp.sendError(HttpServletResponse.SC_CONFLICT, "An item named apple already exists");
            return;
        }
        resp.setStatus(HttpServletResponse.SC_CREATED);
        resp.setContentType("application/json");
        resp.getWriter().write("{\"name\": \"" + name + "\"}");
    }
}
