"""The page ``pyrofling host --web`` serves: HTML, CSS and the WebCodecs viewer (``viewer.js``)."""
