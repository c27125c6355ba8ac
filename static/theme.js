// Applies the stored colour theme before the page paints; without a stored choice the system setting rules.
(function () {
  try {
    var theme = localStorage.getItem("netcl-theme");
    if (theme === "dark" || theme === "light") {
      document.documentElement.setAttribute("data-theme", theme);
    }
  } catch (e) {
    // Storage may be unavailable (privacy mode, file:// restrictions); the system theme then applies.
  }
})();
