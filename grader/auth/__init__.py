"""Who is asking: API tokens and passwords (credentials), browser sessions and CSRF, one-time
password resets, and the roles a user holds on the site and in an assignment."""
